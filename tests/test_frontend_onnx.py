"""The ONNX frontend: per-op agreement with onnxruntime, opsets, shape folding, QDQ, bad input.

Float comparisons use rtol 1e-5 / atol 1e-5 against onnxruntime with every
graph optimization off, on seeded inputs: its float32 kernels differ between
CPUs only in the rounding of sums, orders of magnitude below the tolerance
(onnx.reference would be an equal oracle, but it lacks some of the older
opsets tested here). The QDQ checks fake-quantize the imported graph's
tensors with the parameters the frontend recovered and compare with ONNX's
reference evaluator (no CPU-specific int8 kernels), within one output
quantization step.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from conftest import ROOT
from qdq_oracle import reference_run
from onnx_models import FLOAT, OP_CASES, Case, export_torch_model, gelu_erf_model, gelu_tanh_model, make_model, quantize_qdq, shape_subgraph_model, silu_model, small_cnn
from kiln.errors import KilnError
from kiln.frontends.onnx import import_onnx
from kiln.frontends.onnx.handlers import HANDLERS
from kiln.ir.graph import DTYPES, Graph
from kiln.ir.serialize import dumps
from kiln.reference.executor import FLOAT_IMPLS, run

NEWEST_OPSET = onnx.defs.onnx_opset_version()


def _save(model: onnx.ModelProto, path: Path) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


def _ort(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, feeds)


def _check_against_ort(path: Path, feeds: dict[str, np.ndarray], inputs: dict | None = None) -> Graph:
    graph = import_onnx(path, path.stem, inputs or {}).graph
    got = run(graph, feeds)
    for name, want in zip(graph.outputs, _ort(path, feeds)):
        assert got[name].shape == want.shape, name
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-5, err_msg=name)
    return graph


# -- operators ----------------------------------------------------------------------
@pytest.mark.parametrize("case", OP_CASES, ids=[c.id for c in OP_CASES])
def test_op_matches_onnxruntime(case: Case, tmp_path: Path) -> None:
    graph = _check_against_ort(_save(case.model(), tmp_path / f"{case.id}.onnx"), case.feeds())
    assert graph.nodes, "the case must run a node, not fold to a constant"


@pytest.mark.parametrize("build", [gelu_erf_model, gelu_tanh_model, silu_model], ids=["gelu_erf", "gelu_tanh", "silu"])
def test_decomposed_activations(build, tmp_path: Path) -> None:
    model = build()
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32) * 3
    _check_against_ort(_save(model, tmp_path / "m.onnx"), {"x": x})


@pytest.mark.parametrize("opset", [13, 17, NEWEST_OPSET])
def test_small_cnn_opsets(opset: int, tmp_path: Path) -> None:
    x = np.random.default_rng(opset).standard_normal((2, 3, 16, 16)).astype(np.float32)
    graph = _check_against_ort(_save(small_cnn(opset), tmp_path / "cnn.onnx"), {"x": x}, {"x": {"shape": [2, 3, 16, 16], "dtype": "float32"}})
    assert [n.name for n in graph.nodes] == ["conv1", "bn1", "relu1", "dw2", "relu6", "pool2", "gap", "flatten", "fc", "softmax"]
    assert graph.node("dw2").attrs == {"strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1], "group": 8}
    assert graph.tensors["x"].shape == (2, 3, 16, 16) and graph.outputs == ["probs"]


@pytest.mark.parametrize("dynamo, opset", [(False, 13), (True, 18)], ids=["torchscript_exporter", "dynamo_exporter"])
def test_torch_exported_model(dynamo: bool, opset: int, tmp_path: Path) -> None:
    """What exporters really write: shape subgraphs, Split/Concat, Pad, Erf-GELU, Sigmoid-Mul SiLU, Resize."""
    path = tmp_path / "net.onnx"
    export_torch_model(str(path), dynamo, opset)
    x = np.random.default_rng(8).standard_normal((2, 3, 16, 16)).astype(np.float32)
    graph = _check_against_ort(path, {"x": x}, {"x": {"shape": [2, 3, 16, 16]}})
    ops = {n.op for n in graph.nodes}
    assert {"Erf", "Resize", "Pad", "Split", "Concat", "ReduceMean", "Reshape"} <= ops and not ops & {"Shape", "Gather", "Constant"}


def test_shape_subgraph_folds_to_constants(tmp_path: Path) -> None:
    x = np.random.default_rng(5).standard_normal((3, 2, 3, 4)).astype(np.float32)
    graph = _check_against_ort(_save(shape_subgraph_model(), tmp_path / "m.onnx"), {"x": x}, {"x": {"shape": [3, 2, 3, 4]}})
    assert [n.op for n in graph.nodes] == ["Relu", "Reshape", "MatMul", "Add"]
    assert graph.constant("new_shape").tolist() == [3, -1]
    assert graph.constant("bias_col").ravel().tolist() == [1.0, 2.0, 3.0]


# -- names and determinism --------------------------------------------------------------
def test_names_kept_and_generated_stably(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="first"),
        helper.make_node("Sigmoid", ["a"], ["b"]),
        helper.make_node("Tanh", ["b"], ["c"], name="Sigmoid_1"),
        helper.make_node("Neg", ["c"], ["y"], name="first"),
    ]
    path = _save(make_model(nodes, {"x": ([2, 3], FLOAT)}, {}, ["y"], 17), tmp_path / "m.onnx")
    graph = import_onnx(path, "m", {}).graph
    assert [n.name for n in graph.nodes] == ["first", "Sigmoid_1_1", "Sigmoid_1", "first_1"]
    assert sorted(graph.tensors) == ["a", "b", "c", "x", "y"]


def test_import_is_byte_identical_across_runs_and_folders(tmp_path: Path) -> None:
    model = small_cnn(17)
    first = _save(model, tmp_path / "a.onnx")
    (tmp_path / "elsewhere").mkdir()
    second = _save(model, tmp_path / "elsewhere" / "a.onnx")
    bind = {"x": {"shape": [1, 3, 16, 16]}}
    blobs = {dumps(import_onnx(p, "cnn", bind).graph) for p in (first, second, first)}
    assert len(blobs) == 1


# -- input shapes -----------------------------------------------------------------------
def test_symbolic_dimension_is_bound_from_model_toml(tmp_path: Path) -> None:
    path = _save(small_cnn(17), tmp_path / "m.onnx")
    graph = import_onnx(path, "m", {"x": {"shape": [4, 3, 16, 16], "dtype": "float32"}}).graph
    assert graph.tensors["probs"].shape == (4, 5)


@pytest.mark.parametrize("binding, message", [
    ({}, "input 'x': dimension 0 ('batch') is free"),
    ({"x": {"shape": [1, 3, 8, 16]}}, "model.toml gives 8 for dimension 2, which the model fixes at 16"),
    ({"x": {"shape": [1, 3, 16]}}, "is not 4 positive integers"),
    ({"x": {"shape": [1, 3, 16, 16], "dtype": "int64"}}, "model.toml says dtype int64, the model has float32"),
    ({"image": {"shape": [1, 3, 16, 16]}}, "inputs 'image' in model.toml are not inputs of the model"),
])
def test_bad_input_bindings(binding: dict, message: str, tmp_path: Path) -> None:
    path = _save(small_cnn(17), tmp_path / "m.onnx")
    with pytest.raises(KilnError) as err:
        import_onnx(path, "m", binding)
    assert message in str(err.value) and str(path) in str(err.value) and "\n" not in str(err.value)


# -- bad files and unsupported operators ---------------------------------------------------------
@pytest.mark.parametrize("content", [b"\x08\x07garbage that is not protobuf \xff\xfe", b"", b"PK\x03\x04 a zip file"])
def test_malformed_file_is_one_line_error(content: bytes, tmp_path: Path) -> None:
    path = tmp_path / "broken.onnx"
    path.write_bytes(content)
    with pytest.raises(KilnError) as err:
        import_onnx(path, "m", {})
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_truncated_file_is_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "cut.onnx"
    path.write_bytes(small_cnn(17).SerializeToString()[:700])
    with pytest.raises(KilnError) as err:
        import_onnx(path, "m", {"x": {"shape": [1, 3, 16, 16]}})
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_every_unsupported_operator_is_listed(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="ok"),
        helper.make_node("Resize", ["a", "", "scales"], ["b"], name="smooth", mode="linear"),
        helper.make_node("Sin", ["b"], ["c"], name="wave"),
        helper.make_node("Relu", ["c"], ["y"], name="after"),
    ]
    model = make_model(nodes, {"x": ([1, 2, 3, 4], FLOAT)}, {"scales": np.array([1, 1, 2, 2], np.float32)}, ["y"], 17)
    path = _save(model, tmp_path / "m.onnx")
    with pytest.raises(KilnError) as err:
        import_onnx(path, "m", {})
    lines = str(err.value).splitlines()
    assert lines[0] == f"{path}: 2 operator(s) cannot be imported:"
    assert lines[1] == "node 1 'smooth' (Resize): Resize mode 'linear' (Kiln resizes with nearest only)"
    assert lines[2] == "node 2 'wave' (Sin): operator not supported by Kiln"
    assert len(lines) == 3


def test_unsupported_op_on_constants_is_folded(tmp_path: Path) -> None:
    """Ops outside Kiln's set are fine in constant subgraphs (ONNX's reference evaluates them)."""
    nodes = [helper.make_node("Sin", ["c"], ["s"]), helper.make_node("Add", ["x", "s"], ["y"])]
    c = np.array([0.5, 1.0, 2.0], np.float32)
    path = _save(make_model(nodes, {"x": ([3], FLOAT)}, {"c": c}, ["y"], 17), tmp_path / "m.onnx")
    graph = _check_against_ort(path, {"x": np.ones(3, np.float32)})
    assert [n.op for n in graph.nodes] == ["Add"]


def test_runtime_shape_parameter_is_reported(tmp_path: Path) -> None:
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")]
    model = make_model(nodes, {"x": ([2, 6], FLOAT), "shape": ([2], onnx.TensorProto.INT64)}, {}, ["y"], 17)
    with pytest.raises(KilnError, match=r"node 0 'reshape' \(Reshape\): Reshape shape must be a constant"):
        import_onnx(_save(model, tmp_path / "m.onnx"), "m", {"shape": {"shape": [2]}})


# -- external data ---------------------------------------------------------------------------------
def _external_model(folder: Path, location: str = "weights.bin") -> Path:
    (folder / location).parent.mkdir(parents=True, exist_ok=True)
    path = folder / "m.onnx"
    onnx.save_model(small_cnn(17), str(path), save_as_external_data=True, location=location, size_threshold=0)
    return path


def _relocate(path: Path, location: str) -> None:
    model = onnx.load(str(path), load_external_data=False)
    for t in model.graph.initializer:
        for entry in t.external_data:
            if entry.key == "location":
                entry.value = location
    path.write_bytes(model.SerializeToString())


def test_external_data_inside_the_folder_loads(tmp_path: Path) -> None:
    path = _external_model(tmp_path / "model", "data/weights.bin")
    x = np.random.default_rng(2).standard_normal((1, 3, 16, 16)).astype(np.float32)
    _check_against_ort(path, {"x": x}, {"x": {"shape": [1, 3, 16, 16]}})


@pytest.mark.parametrize("escape", ["parent", "absolute", "symlink"])
def test_external_data_outside_the_folder_is_refused(escape: str, tmp_path: Path) -> None:
    path = _external_model(tmp_path / "model")
    outside = tmp_path / "outside.bin"
    os.replace(path.parent / "weights.bin", outside)
    if escape == "parent":
        _relocate(path, "../outside.bin")
    elif escape == "absolute":
        _relocate(path, str(outside))
    else:
        (path.parent / "weights.bin").symlink_to(outside)
    with pytest.raises(KilnError) as err:
        import_onnx(path, "m", {"x": {"shape": [1, 3, 16, 16]}})
    message = str(err.value)
    assert str(path) in message and "tensor 'w1'" in message and "model's folder" in message and "\n" not in message


# -- QDQ ---------------------------------------------------------------------------------------------
def _quantize(tmp_path: Path, activation: str) -> Path:
    return quantize_qdq(tmp_path / f"qdq_{activation}.onnx", activation, ["Conv", "Add", "MaxPool", "Flatten", "Gemm"])


def _fake_quant(a: np.ndarray, quant) -> np.ndarray:
    scale, zp = np.float32(quant.scale[0]), quant.zero_point[0]
    return (np.clip(np.rint(a.astype(np.float32) / scale) + zp, -128, 127) - zp).astype(np.float32) * scale


def _run_fake_quantized(graph: Graph, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The float reference, with every run-time tensor that carries quantization parameters rounded to its grid."""
    values = {k: t.data for k, t in graph.tensors.items() if t.data is not None}
    for name in graph.inputs:
        t = graph.tensors[name]
        values[name] = _fake_quant(feeds[name], t.quant) if t.quant else feeds[name]
    for node in graph.nodes:
        outs = FLOAT_IMPLS[node.op](node, [values[i] if i else None for i in node.inputs])
        for name, arr in zip(node.outputs, outs):
            t = graph.tensors[name]
            arr = np.asarray(arr).astype(DTYPES[t.dtype]).reshape(t.shape)
            values[name] = _fake_quant(arr, t.quant) if t.quant else arr
    return values


@pytest.fixture(scope="module", params=["QUInt8", "QInt8"])
def qdq_model(request, tmp_path_factory) -> tuple[Path, Graph, str]:
    path = _quantize(tmp_path_factory.mktemp("qdq"), request.param)
    return path, import_onnx(path, "qdq", {}).graph, request.param


def test_qdq_activation_params_match_the_model(qdq_model) -> None:
    path, graph, activation = qdq_model
    model = onnx.load(str(path))
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    shift = 128 if activation == "QUInt8" else 0
    quantized = [n for n in model.graph.node if n.op_type == "QuantizeLinear"]
    assert len(quantized) >= 8 and graph.meta["quantized_source"] == "qdq"
    for q in quantized:
        scale, zp = inits[q.input[1]], inits[q.input[2]]
        assert zp.dtype == (np.uint8 if shift else np.int8)
        t = graph.tensors[q.input[0]]
        assert t.dtype == "float32" and t.quant.axis is None, q.input[0]
        assert t.quant.scale == (float(scale),) and t.quant.zero_point == (int(zp) - shift,), q.input[0]
    assert graph.tensors["probs"].quant is None, "the float Softmax island stays unquantized"


def test_qdq_constants_are_exact_dequantized_values(qdq_model) -> None:
    path, graph, _ = qdq_model
    model = onnx.load(str(path))
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    checked = 0
    for dq in model.graph.node:
        if dq.op_type != "DequantizeLinear" or dq.input[0] not in inits:
            continue
        q, scale = inits[dq.input[0]], inits[dq.input[1]]
        zp = inits[dq.input[2]] if len(dq.input) > 2 else np.zeros_like(q, shape=scale.shape)
        axis = [a.i for a in dq.attribute if a.name == "axis"]
        axis = (axis[0] if axis else 1) if scale.ndim else None
        shape = [1] * q.ndim
        if axis is not None:
            shape[axis] = -1
        t = graph.tensors[dq.output[0]]
        want = (q.astype(np.int64) - zp.reshape(shape)).astype(np.float32) * scale.reshape(shape)
        assert t.dtype == "float32" and np.array_equal(t.data, want), dq.output[0]
        assert t.quant.axis == axis and t.quant.scale == tuple(scale.ravel().tolist())
        assert t.quant.zero_point == tuple(int(z) for z in zp.ravel())
        recovered = np.rint(t.data / scale.reshape(shape)) + zp.reshape(shape)
        assert np.array_equal(recovered, q), "the quantize stage must recover the integers"
        checked += 1
    assert checked == 9  # five weights, four int32 biases
    assert graph.tensors["w1_DequantizeLinear_Output"].quant.axis == 0
    assert graph.tensors["b1"].quant.axis == 0


def test_qdq_fake_quantized_import_agrees_with_onnx_reference(qdq_model) -> None:
    path, graph, _ = qdq_model
    step = graph.tensors["logits"].quant.scale[0]
    rng = np.random.default_rng(21)
    diffs = []
    for _ in range(20):
        x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
        want = reference_run(path, {"x": x})["logits"]
        diffs.append(np.abs(_run_fake_quantized(graph, {"x": x})["logits"] - want).ravel())
    within = np.mean(np.concatenate(diffs) <= step * (1 + 1e-6))
    assert within >= 0.99, f"{within:.2%} of logits within one step {step}"


def test_qdq_saturation_is_kept_as_clip(qdq_model) -> None:
    """onnxruntime's quantizer relies on saturation (a range starting at 0 is a Relu): the frontend keeps it."""
    _, graph, _ = qdq_model
    clip = graph.node("c1_DequantizeLinear")
    assert clip.op == "Clip" and clip.inputs[0] == "c1"
    lo, hi = (float(graph.constant(i)) for i in clip.inputs[1:])
    q = graph.tensors["c1"].quant
    assert (lo, hi) == pytest.approx(((-128 - q.zero_point[0]) * q.scale[0], (127 - q.zero_point[0]) * q.scale[0]))
    assert graph.node("pool").op == "MaxPool" and "pool_DequantizeLinear_Output" not in graph.tensors, "MaxPool keeps its input's range: no Clip"


def _qdq(x: str, y: str, scale: str = "s", zp: str = "z", dq_scale: str | None = None) -> list[onnx.NodeProto]:
    return [helper.make_node("QuantizeLinear", [x, scale, zp], [f"{x}_q"]), helper.make_node("DequantizeLinear", [f"{x}_q", dq_scale or scale, zp], [y])]


def _qdq_model(nodes: list[onnx.NodeProto], outputs: list[str], consts: dict | None = None) -> onnx.ModelProto:
    params = {"s": np.float32(0.05), "z": np.uint8(100), "s2": np.float32(0.1), **(consts or {})}
    return make_model(nodes, {"x": ([1, 2, 4, 4], FLOAT)}, params, outputs, 17)


def test_qdq_output_alias_keeps_the_onnx_name(tmp_path: Path) -> None:
    """x→Q→DQ→MaxPool→Q→DQ→y: the pool cannot leave the range, so its output is renamed y, without a Clip."""
    nodes = [*_qdq("x", "xd"), helper.make_node("MaxPool", ["xd"], ["pool"], name="pool", kernel_shape=[2, 2]), *_qdq("pool", "y")]
    path = _save(_qdq_model(nodes, ["y"]), tmp_path / "m.onnx")
    graph = import_onnx(path, "m", {}).graph
    assert [(n.op, n.outputs) for n in graph.nodes] == [("Clip", ["xd"]), ("MaxPool", ["y"])]
    assert graph.outputs == ["y"] and graph.tensors["y"].quant == graph.tensors["x"].quant
    assert graph.tensors["x"].quant.scale == (float(np.float32(0.05)),) and graph.tensors["x"].quant.zero_point == (100 - 128,)
    x = np.random.default_rng(4).standard_normal((1, 2, 4, 4)).astype(np.float32) * 8
    np.testing.assert_allclose(_run_fake_quantized(graph, {"x": x})["y"], reference_run(path, {"x": x})["y"], rtol=0, atol=1e-6)


@pytest.mark.parametrize("kind, message", [
    ("requantize", "DequantizeLinear parameters differ from its QuantizeLinear's"),
    ("q_output", "uses QuantizeLinear output 'x_q' directly"),
    ("per_axis", "per-axis quantization of a run-time tensor"),
])
def test_unsupported_qdq_patterns(kind: str, message: str, tmp_path: Path) -> None:
    if kind == "requantize":
        nodes, outputs, consts = [*_qdq("x", "y", dq_scale="s2")], ["y"], {}
    elif kind == "q_output":
        nodes, outputs, consts = [*_qdq("x", "xd"), helper.make_node("Cast", ["x_q"], ["y"], to=FLOAT)], ["y"], {}
    else:
        nodes, outputs, consts = [*_qdq("x", "y", scale="sc", zp="zc")], ["y"], {"sc": np.array([0.1, 0.2], np.float32), "zc": np.array([1, 2], np.uint8)}
    path = _save(_qdq_model(nodes, outputs, consts), tmp_path / "m.onnx")
    with pytest.raises(KilnError, match=message):
        import_onnx(path, "m", {})


def test_the_documented_operator_list_is_the_handler_table() -> None:
    """docs/models.md lists every op type the importer maps, once, and no other: a handler added or removed
    without the page fails here."""
    page = (ROOT / "docs/models.md").read_text()
    section = page.split("\n## What the ONNX frontend supports\n", 1)[1].split("\n## ", 1)[0]
    listed = [name for line in section.splitlines() if line.startswith("| `") for name in re.findall(r"`(\w+)`", line.split(" | ")[0])]
    assert len(listed) == len(set(listed)) and sorted(listed) == sorted(HANDLERS)
