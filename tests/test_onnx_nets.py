"""Ops of real ONNX nets: LRN and the N-input Sum/Mean/Max/Min, from the file to generated C.

One small float model holds all of them (LRN with odd and even windows, after
a ReLU as in AlexNet and GoogLeNet, and on signed values). Its imported graph
must compute what ONNX's reference evaluator computes; its int8 C must equal
Kiln's integer reference bit for bit under sanitizers and stay close to the
float model; its float C must match the float reference.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from model_builds import shared_root
from kiln import host
from kiln.check import reference_outputs, seeded_inputs
from kiln.cli import main as kiln
from kiln.frontends.onnx import import_onnx
from kiln.ir import load
from kiln.ir.verify import verify
from kiln.quantize.kept import load_samples
from kiln.reference.executor import run
from kiln.runio import dequantize_outputs, quantize_inputs

# A batch as large as the channel count at both LRNs: onnx's ReferenceEvaluator (1.17) loops its LRN over
# the batch dimension where ONNX defines the channel one; with N == C the two agree.
SHAPE = (6, 3, 12, 12)
FLOAT_TOLERANCE = 1e-4  # max |C - reference| relative to max(1, max |reference|): float32 arithmetic, as test_codegen
SQNR_FLOOR_DB = 25.0  # int8 against float: roughly 8 bits less the several requantizations of LRN's four kernels


def _net() -> onnx.ModelProto:
    rng = np.random.default_rng(7)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("LRN", ["r1"], ["n1"], name="lrn5", size=5, alpha=0.05, beta=0.75, bias=1.0),
        helper.make_node("Conv", ["n1", "w2"], ["a"], name="conv2"),
        helper.make_node("Conv", ["x", "w3"], ["b"], name="conv3", pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["r1", "w4"], ["c"], name="conv4"),
        helper.make_node("Sum", ["a", "b", "c"], ["sum3"], name="sum3"),
        helper.make_node("LRN", ["sum3"], ["n2"], name="lrn4", size=4, alpha=0.2, beta=0.5, bias=2.0),
        helper.make_node("Mean", ["a", "b", "n2"], ["mean3"], name="mean3"),
        helper.make_node("Max", ["a", "b", "c"], ["max3"], name="max3"),
        helper.make_node("Min", ["mean3", "max3"], ["min2"], name="min2"),
        helper.make_node("Sum", ["min2"], ["y"], name="sum1"),
    ]
    inits = [weight("w1", 6, 3, 3, 3), numpy_helper.from_array(rng.standard_normal(6).astype(np.float32) * 0.1, "b1"),
             weight("w2", 6, 6, 1, 1), weight("w3", 6, 3, 3, 3), weight("w4", 6, 6, 1, 1)]
    graph = helper.make_graph(nodes, "nets", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6, 6, 12, 12])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("onnx_nets") / "nets"  # the folder names the model
    folder.mkdir()
    onnx.save(_net(), folder / "nets.onnx")
    np.save(folder / "calib.npy", np.random.default_rng(0).standard_normal((16, *SHAPE)).astype(np.float32))
    return folder


def _compile(source: Path, out: Path, mode: str) -> Path:
    (source / "model.toml").write_text(f'[model]\nsource = "nets.onnx"\n\n[quant]\nmode = "{mode}"\ncalibration = ["calib.npy"]\n')
    assert kiln(["compile", str(source), "-o", str(out)]) == 0
    return out


def test_imported_graph_computes_what_onnx_defines(source: Path) -> None:
    graph = import_onnx(source / "nets.onnx", "nets", {}).graph
    oracle = ReferenceEvaluator(str(source / "nets.onnx"))
    for x in np.load(source / "calib.npy")[:4]:
        want = oracle.run(None, {"x": x})[0]
        got = run(graph, {"x": x})["y"]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_int8_c_is_bit_exact_and_close_to_float(source: Path, tmp_path: Path, tmp_path_factory) -> None:
    out = _compile(source, tmp_path / "int8", "int8")
    planned, quantized = load(out / "planned.kir"), load(out / "quantized.kir")
    for artifact in ("normalized", "quantized", "lowered", "planned"):
        verify(load(out / f"{artifact}.kir"), levels=("kernel",))
    kernels = {n.attrs["kernel"] for n in planned.nodes}
    assert {"kiln_lut_s8", "kiln_mul_s8", "kiln_maximum_s8", "kiln_minimum_s8"} <= kernels
    assert kernels & {"kiln_add_s8", "kiln_add_table_s8"}  # Sum and Mean as chains of adds
    assert not {n.op for n in load(out / "normalized.kir").nodes} & {"LRN", "Sum", "Mean", "Max", "Min"}
    floats = seeded_inputs(quantized, load_samples(out).inputs, count=8)
    samples = quantize_inputs(quantized, floats)
    exe = host.build_executable([out / "nets.c"], ["nets"], out / "asan", sanitize=True,
                                object_cache=shared_root(tmp_path_factory.getbasetemp(), "kiln-objects"))
    got = host.run_executable(exe, planned, samples)
    want = reference_outputs(quantized, samples)
    assert all(np.array_equal(g[0], w[0]) for g, w in zip(got, want))
    normalized = load(out / "normalized.kir")
    signal = noise = 0.0
    for sample, result in zip(floats, dequantize_outputs(planned, got)):
        ref = run(normalized, dict(zip(normalized.inputs, sample)))["y"].astype(np.float64)
        signal += float(np.sum(ref**2))
        noise += float(np.sum((result[0] - ref) ** 2))
    assert 10 * np.log10(signal / noise) >= SQNR_FLOOR_DB


def test_float_c_matches_float_reference(source: Path, tmp_path: Path, tmp_path_factory) -> None:
    out = _compile(source, tmp_path / "float", "none")
    planned, quantized = load(out / "planned.kir"), load(out / "quantized.kir")
    assert "kiln_lrn_scale_f32" in {n.attrs["kernel"] for n in planned.nodes}
    samples = seeded_inputs(quantized, load_samples(out).inputs, count=4)
    exe = host.build_executable([out / "nets.c"], ["nets"], out / "asan", sanitize=True,
                                object_cache=shared_root(tmp_path_factory.getbasetemp(), "kiln-objects"))
    for g, w in zip(host.run_executable(exe, planned, samples), reference_outputs(quantized, samples)):
        assert np.max(np.abs(g[0] - w[0])) <= FLOAT_TOLERANCE * max(1.0, float(np.max(np.abs(w[0]))))
