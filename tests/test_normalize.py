"""The normalize stage end to end, on graphs from both frontends and the models in models/.

For every supported case: the float reference agrees before and after
normalization (1e-5 relative to the output's magnitude, seeded inputs), the
result is kernel level with no BatchNorm, no shape arithmetic, no clamp left
after an op that could absorb it, and its bytes do not depend on the run or
on the order in which the source listed its nodes.
"""
from __future__ import annotations

import logging
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

import onnx_models
import torch_models
from passes.graphs import Builder, conv_bn_relu
from kiln.config import load as load_config
from kiln.errors import KilnError
from kiln.frontends import import_model
from kiln.frontends.onnx import import_onnx
from kiln.frontends.torch_module import import_module
from kiln.ir import dumps, save
from kiln.ir.graph import Graph
from kiln.ir.ops import OPS
from kiln.ir.verify import verify
from kiln.normalize import PASS_NAMES, normalize
from kiln.normalize.rewrite import ACT_OPS
from kiln.reference.executor import run

# Source-level models (a quantized .tflite file imports in kernel form already: tests/test_frontend_tflite.py).
MODELS = sorted(p.parent for p in (Path(__file__).parent.parent / "models").glob("*/model.toml") if not any(p.parent.glob("*.tflite")))
# Cases with no kernel form, and the op the error must name.
UNSUPPORTED = {
    "gemm_no_c": "Gemm", "erf": "Erf", "conv_transpose_general": "ConvTranspose", "pow_const": "Pow", "sqrt": "Sqrt", "exp": "Exp",
    "maxpool_ceil_dilated": "MaxPool", "slice_steps": "Slice", "dropout_mask": "Dropout",
    "addmm": "Gemm", "max_pool_ceil_dilated": "MaxPool", "elementwise_math": "Sqrt", "cast": "Cast",
}


def _feeds(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(graph.tensors[k].shape).astype(np.float32) for k in graph.inputs}


def check_normalized(source: Graph, config: dict | None = None) -> Graph:
    """Normalize `source` and check every pipeline-level promise; returns the result."""
    before = dumps(source)
    out = normalize(source, config or {}, check=True)
    assert dumps(source) == before, "normalize modified its input"
    verify(out, levels=("kernel",))
    assert all(OPS[n.op].level == "kernel" for n in out.nodes)
    assert all(t.dtype == "float32" for t in out.tensors.values()), "shape arithmetic or integer data left"
    readers: dict[str, int] = {}
    for n in out.nodes:
        for i in n.inputs:
            readers[i] = readers.get(i, 0) + 1
    producer = out.producers()
    for n in out.nodes:
        p = producer.get(n.inputs[0]) if n.op == "clamp" else None
        assert p is None or p.op not in ACT_OPS or readers[n.inputs[0]] > 1 or n.inputs[0] in out.outputs, f"clamp {n.name} not fused"
    feeds = _feeds(source)
    nhwc = {k: v.transpose(0, 2, 3, 1) if out.tensors[k].shape != source.tensors[k].shape else v for k, v in feeds.items()}
    want, got = run(source, feeds), run(out, nhwc)
    for name in source.outputs:
        scale = max(float(np.abs(want[name]).max(initial=0.0)), 1e-12)
        assert float(np.abs(got[name] - want[name]).max(initial=0.0)) <= 1e-5 * scale, name
    assert dumps(normalize(source, config or {})) == dumps(out), "not deterministic across runs"
    return out


def shuffled(graph: Graph, seed: int) -> Graph:
    """The same graph with its nodes in another valid topological order and its tensors in another dict order."""
    rng = random.Random(seed)
    producer = graph.producers()
    pending = {n.name: {producer[i].name for i in n.inputs if i in producer} for n in graph.nodes}
    by_name = {n.name: n for n in graph.nodes}
    order: list = []
    while pending:
        ready = sorted(k for k, deps in pending.items() if not deps)
        pick = rng.choice(ready)
        order.append(by_name[pick].copy())
        del pending[pick]
        for deps in pending.values():
            deps.discard(pick)
    names = list(graph.tensors)
    rng.shuffle(names)
    return Graph(graph.name, {k: graph.tensors[k].copy() for k in names}, order, list(graph.inputs), list(graph.outputs), dict(graph.meta))


def _onnx_graph(model: onnx.ModelProto, tmp_path: Path, name: str, inputs: dict | None = None) -> Graph:
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    return import_onnx(path, name, inputs or {}).graph


@pytest.mark.parametrize("case", onnx_models.OP_CASES, ids=lambda c: c.id)
def test_onnx_operator_cases(case, tmp_path: Path) -> None:
    graph = _onnx_graph(case.model(), tmp_path, case.id)
    if case.id not in UNSUPPORTED:
        check_normalized(graph)
        return
    with pytest.raises(KilnError, match=rf"^node \d+ '[^']*' \({UNSUPPORTED[case.id]}\).*: cannot be brought to kernel form: {UNSUPPORTED[case.id]} "):
        normalize(graph, {})


@pytest.mark.parametrize("case", torch_models.CASES, ids=lambda c: c.name)
def test_torch_module_cases(case) -> None:
    torch.manual_seed(0)
    graph = import_module(case.build().eval(), tuple(torch.randn(s) for s in case.shapes), case.name)
    if case.name not in UNSUPPORTED:
        check_normalized(graph)
        return
    with pytest.raises(KilnError, match=rf"^node \d+ '[^']*' \({UNSUPPORTED[case.name]}\).*: cannot be brought to kernel form: {UNSUPPORTED[case.name]} "):
        normalize(graph, {})


def _only_interface_transposes(graph: Graph) -> None:
    """Every remaining transpose reads a graph input or writes a graph output: no layout shuffling inside.

    A QDQ source clamps its input to the input's quantized range first; the
    transpose may read that clamp (see docs/normalize.md).
    """
    producers = graph.producers()
    for n in graph.nodes:
        if n.op == "transpose":
            source = n.inputs[0]
            while source in producers and producers[source].op == "clamp":
                source = producers[source].inputs[0]
            assert source in graph.inputs or n.outputs[0] in graph.outputs, n.name


def test_onnx_small_cnn_and_shape_subgraph(tmp_path: Path) -> None:
    cnn = check_normalized(_onnx_graph(onnx_models.small_cnn(17), tmp_path, "cnn", {"x": {"shape": [2, 3, 16, 16]}}))
    assert [n.op for n in cnn.nodes] == ["transpose", "conv2d", "depthwise_conv2d", "max_pool2d", "global_avg_pool", "reshape", "fully_connected", "softmax"]
    assert [(n.attrs["act_min"], n.attrs["act_max"]) for n in cnn.nodes[1:3]] == [(0.0, np.inf), (0.0, 6.0)]
    shapes = check_normalized(_onnx_graph(onnx_models.shape_subgraph_model(), tmp_path, "shapes", {"x": {"shape": [2, 2, 3, 4]}}))
    assert [n.op for n in shapes.nodes] == ["clamp", "reshape", "fully_connected", "add"]


def test_onnx_decompositions_fuse(tmp_path: Path) -> None:
    for build, op in ((onnx_models.gelu_erf_model, "gelu"), (onnx_models.gelu_tanh_model, "gelu"), (onnx_models.silu_model, "silu")):
        graph = _onnx_graph(build(), tmp_path, op)
        out = check_normalized(graph)
        assert op in [n.op for n in out.nodes] and not {"Erf", "Pow", "Tanh", "Sigmoid"} & {n.op for n in out.nodes}


def test_qdq_parameters_follow_every_weight_rewrite(tmp_path: Path) -> None:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(11)
            self.samples = iter([{"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.samples, None)

    source, target = tmp_path / "float.onnx", tmp_path / "qdq.onnx"
    onnx.save(onnx_models.qdq_source_model(), source)
    logging.disable(logging.WARNING)
    try:
        quantize_static(str(source), str(target), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, op_types_to_quantize=["Conv", "Add", "MaxPool", "Flatten", "Gemm"])
    finally:
        logging.disable(logging.NOTSET)
    graph = import_onnx(target, "qdq", {}).graph
    out = check_normalized(graph)
    weights = {n.op: out.tensors[n.inputs[1]] for n in out.nodes if n.op in ("conv2d", "depthwise_conv2d", "fully_connected")}
    for op, axis in (("conv2d", 0), ("depthwise_conv2d", 3), ("fully_connected", 0)):
        w = weights[op]
        assert w.quant is not None and w.quant.axis == axis and len(w.quant.scale) == w.shape[axis], op
        q = np.round(w.data / np.asarray(w.quant.scale).reshape([-1 if d == axis else 1 for d in range(w.data.ndim)]))
        np.testing.assert_allclose(q * np.asarray(w.quant.scale).reshape([-1 if d == axis else 1 for d in range(w.data.ndim)]), w.data, rtol=1e-6, atol=1e-7)
    assert [n.op for n in out.nodes].count("transpose") == 1  # at the input, after its QDQ clamp


@pytest.mark.parametrize("folder", MODELS, ids=lambda p: p.name)
def test_models(folder: Path) -> None:
    config = load_config(folder / "model.toml")
    graph = import_model(folder / config["model"]["source"], folder.name, config["inputs"]).graph
    out = check_normalized(graph, config["normalize"])
    _only_interface_transposes(out)
    nhwc = check_normalized(graph, {**config["normalize"], "input_layout": "NHWC"})
    assert "transpose" not in [n.op for n in nhwc.nodes]
    for name in graph.inputs:
        t = nhwc.tensors[name]
        if len(t.shape) == 4:
            assert t.layout == "NHWC" and t.shape == tuple(graph.tensors[name].shape[i] for i in (0, 2, 3, 1))
    for seed in range(3):
        assert dumps(normalize(shuffled(graph, seed), config["normalize"])) == dumps(out)


def _residual() -> Graph:
    """Two branches joined by Add and Concat, BN, SiLU, a head on the flattened map: many valid node orders."""
    b = Builder("residual")
    x = b.input("x", (1, 3, 8, 8))
    stem = b.op("Relu", [b.op("Conv", [x, b.weight("w0", 4, 3, 3, 3), b.weight("b0", 4)], {"pads": [1, 1, 1, 1]})])
    left = b.op("Conv", [stem, b.weight("w1", 4, 4, 1, 1, seed=1)])
    right = b.op("Conv", [stem, b.weight("w2", 4, 1, 3, 3, seed=2)], {"group": 4, "pads": [1, 1, 1, 1]})
    right = b.op("Mul", [right, b.op("Sigmoid", [right])])
    joined = b.op("Concat", [b.op("Add", [left, right]), stem], {"axis": 1})
    pooled = b.op("MaxPool", [joined], {"kernel_shape": [2, 2], "strides": [2, 2]})
    flat = b.op("Flatten", [pooled])
    return b.output(b.op("Gemm", [flat, b.weight("fc", 5, 128, seed=3), b.weight("fb", 5, seed=4)], {"transB": 1}))


def test_result_is_independent_of_the_source_node_order() -> None:
    for graph in (_residual(), conv_bn_relu()):
        want = dumps(check_normalized(graph))
        for seed in range(6):
            assert dumps(normalize(shuffled(graph, seed), {})) == want


def test_config_disable_and_unknown_names() -> None:
    graph = _residual()
    fused = normalize(graph, {})
    unfused = normalize(graph, {"disable": ["fuse_activation", "fuse_silu"]})
    assert "clamp" not in [n.op for n in fused.nodes] and "clamp" in [n.op for n in unfused.nodes]
    assert "silu" in [n.op for n in fused.nodes] and "silu" not in [n.op for n in unfused.nodes]
    with pytest.raises(KilnError, match=r"^normalize.disable: unknown pass 'fuse_relu' \(did you mean 'fuse_gelu'\?\) \(known passes: fold_constants, .*, fuse_activation\)$"):
        normalize(graph, {"disable": ["fuse_relu"]})
    with pytest.raises(KilnError, match=r"cannot be brought to kernel form: Conv .*\(disabled passes: to_nhwc\)$"):
        normalize(graph, {"disable": ["to_nhwc"]})
    with pytest.raises(KilnError, match=r"unknown key 'normalize.disabled' \(did you mean 'disable'\?\)"):
        normalize(graph, {"disabled": []})
    with pytest.raises(KilnError, match=r"normalize.input_layout: 'NCWH' is not one of 'source', 'NHWC'"):
        normalize(graph, {"input_layout": "NCWH"})
    assert len(PASS_NAMES) == len(set(PASS_NAMES))


def test_input_layout_nhwc_and_single_channel_reshape() -> None:
    graph = _residual()
    source = check_normalized(graph)
    assert source.tensors["x"].layout == "NCHW" and source.nodes[0].op == "transpose" and source.nodes[0].inputs == ["x"]
    nhwc = check_normalized(graph, {"input_layout": "NHWC"})
    assert (nhwc.tensors["x"].shape, nhwc.tensors["x"].layout) == ((1, 8, 8, 3), "NHWC")
    assert "transpose" not in [n.op for n in nhwc.nodes]
    b = Builder()
    mono = b.output(b.op("Conv", [b.input("x", (2, 1, 5, 5)), b.weight("w", 3, 1, 3, 3)]))
    out = check_normalized(mono)
    assert [n.op for n in out.nodes] == ["reshape", "conv2d", "transpose"]


def test_bytes_do_not_depend_on_hash_seeds(tmp_path: Path) -> None:
    """Separate processes with different string-hash seeds (set and dict effects) write the same bytes."""
    source = tmp_path / "residual.kir"
    save(_residual(), source)
    script = "import sys, hashlib; from kiln.ir import load, dumps; from kiln.normalize import normalize; " \
             "print(hashlib.sha256(dumps(normalize(load(sys.argv[1]), {}))).hexdigest())"
    digests = {
        subprocess.run([sys.executable, "-c", script, str(source)], env={**os.environ, "PYTHONHASHSEED": seed},
                       check=True, capture_output=True, text=True).stdout
        for seed in ("1", "2", "3")
    }
    assert len(digests) == 1
