"""Models whose Mul/MUL reach kiln_mul_s8's lane paths, from the file to generated C on the host and the Cortex-M4.

A full-integer TFLite file (MULs of two maps with a fused ReLU, of a map and a
per-channel constant vector, of a map and a constant scalar) is compiled by
`kiln compile` and its C compared bit for bit with TFLite Micro's interpreter
on the host (sanitized) and under QEMU (the DSP lanes). A float ONNX
squeeze-and-excitation block (a map times its per-channel sigmoid gate, then
times a second map and a constant scalar) is compiled to int8 and compared bit
for bit with Kiln's integer reference the same two ways.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from tflite_micro.python.tflite_micro import runtime

from model_builds import shared_root
from test_frontend_tflite import INT8, Op, model_bytes, operator, tensor, tfl
from test_kernels import mul_path
from kiln import host
from kiln.check import reference_outputs
from kiln.cli import main as kiln
from kiln.host import model_prefix
from kiln.ir import load
from kiln.lower.specialize import KILN_RQ_FAST
from kiln.model_table import firmware_model
from kiln.target import cortex_m, qemu

MAP = (1, 5, 6, 8)


def tflite_model() -> bytes:
    """y = MUL(MUL(RELU(MUL(x, g)), v), s): g a second map, v a per-channel int8 vector, s an int8 scalar."""
    rng = np.random.default_rng(3)
    x, g = tensor("x", MAP, INT8, 0.05, -3), tensor("g", MAP, INT8, 1 / 256, -128)
    m1, m2, y = tensor("m1", MAP, INT8, 0.02, -128), tensor("m2", MAP, INT8, 0.03, 5), tensor("y", MAP, INT8, 0.05, -1)
    v = tensor("v", (MAP[3],), INT8, 0.01, 0, rng.integers(-128, 128, MAP[3]).astype(np.int8))
    s = tensor("s", (1,), INT8, 0.02, 10, np.array([77], np.int8))
    relu = tfl.ActivationFunctionType.RELU
    ops = [operator(Op.MUL, [x, g], [m1], "MulOptions", fusedActivationFunction=relu),
           operator(Op.MUL, [m1, v], [m2], "MulOptions"), operator(Op.MUL, [s, m2], [y], "MulOptions")]
    return model_bytes(ops, [x, g], [y])


def onnx_model() -> onnx.ModelProto:
    """A squeeze-and-excitation block, NCHW: r = ReLU(conv(x)), y = r * sigmoid(conv1x1(mean(r))) * r2 * 0.75."""
    rng = np.random.default_rng(4)
    c = MAP[3]

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32), name)

    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c1"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]), helper.make_node("Conv", ["p", "w2", "b2"], ["e"]),
             helper.make_node("Sigmoid", ["e"], ["gate"]), helper.make_node("Mul", ["r", "gate"], ["se"]),
             helper.make_node("Conv", ["x", "w3"], ["r2"], pads=[1, 1, 1, 1]), helper.make_node("Mul", ["se", "r2"], ["m"]),
             helper.make_node("Mul", ["m", "k"], ["y"])]
    inits = [weight("w1", c, 3, 3, 3), weight("w2", c, c, 1, 1), weight("w3", c, 3, 3, 3),
             numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b2"),
             numpy_helper.from_array(np.array(0.75, np.float32), "k")]
    shape = [1, 3, MAP[1], MAP[2]]
    graph = helper.make_graph(nodes, "se", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, MAP[1], MAP[2]])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """Both models compiled by `kiln compile`, and one Cortex-M4 image holding both."""
    root = tmp_path_factory.mktemp("mul_models")
    (root / "tfl").mkdir()
    (root / "tfl" / "mul_tfl.tflite").write_bytes(tflite_model())
    assert kiln(["compile", str(root / "tfl" / "mul_tfl.tflite"), "-o", str(root / "out_tfl")]) == 0
    folder = root / "mul_onnx"
    folder.mkdir()
    onnx.save(onnx_model(), folder / "se.onnx")
    np.save(folder / "calib.npy", np.random.default_rng(0).standard_normal((8, 1, 3, MAP[1], MAP[2])).astype(np.float32))
    (folder / "model.toml").write_text('[model]\nsource = "se.onnx"\n\n[quant]\nmode = "int8"\ncalibration = ["calib.npy"]\n')
    assert kiln(["compile", str(folder), "-o", str(root / "out_onnx")]) == 0
    outs = {"mul_tfl": root / "out_tfl", "mul_onnx": root / "out_onnx"}
    sources = [outs[n] / f"{n}.c" for n in outs]
    models = [firmware_model(model_prefix(outs[n] / f"{n}.h"), (outs[n] / f"{n}.h").read_text()) for n in outs]
    return {**outs, "elf": cortex_m.build_firmware(sources, models, root / "mul.elf"), "root": root}


def _samples(graph, count: int = 3) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(5)
    return [[rng.integers(-128, 128, graph.tensors[n].shape).astype(np.int8) for n in graph.inputs] for _ in range(count)]


def _run_both(built: dict[str, Path], name: str, samples, tmp_path_factory) -> tuple[list, list]:
    planned = load(built[name] / "planned.kir")
    exe = host.build_executable([built[name] / f"{name}.c"], [name], built["root"] / f"{name}_asan", sanitize=True,
                                object_cache=shared_root(tmp_path_factory.getbasetemp(), "kiln-objects"))
    on_host = host.run_executable(exe, planned, samples)
    on_m4 = qemu.run_firmware(built["elf"], planned, samples, model=name).outputs
    return on_host, on_m4


def test_tflite_mul_matches_tflite_micro_on_host_and_cortex_m4(built, tmp_path_factory) -> None:
    planned = load(built["mul_tfl"] / "planned.kir")
    muls = [n for n in planned.nodes if n.attrs.get("kernel") == "kiln_mul_s8"]
    assert sorted(mul_path(n).split(",")[0] for n in muls) == ["mul channel", "mul rows", "mul scalar first"]
    assert all(dict(zip(n.attrs["param_names"], n.attrs["params"]))["requant"] & KILN_RQ_FAST for n in muls)
    samples = _samples(planned)
    interpreter = runtime.Interpreter.from_bytes(tflite_model(), arena_size=1 << 20)
    on_host, on_m4 = _run_both(built, "mul_tfl", samples, tmp_path_factory)
    for sample, got_host, got_m4 in zip(samples, on_host, on_m4):
        for i, x in enumerate(sample):
            interpreter.set_input(x, i)
        interpreter.invoke()
        want = interpreter.get_output(0)
        assert np.array_equal(got_host[0], want) and np.array_equal(got_m4[0], want)


def test_onnx_mul_matches_the_reference_on_host_and_cortex_m4(built, tmp_path_factory) -> None:
    planned, quantized = load(built["mul_onnx"] / "planned.kir"), load(built["mul_onnx"] / "quantized.kir")
    muls = [n for n in planned.nodes if n.attrs.get("kernel") == "kiln_mul_s8"]
    assert sorted(mul_path(n).split(",")[0] for n in muls) == ["mul channel", "mul rows", "mul scalar"], [mul_path(n) for n in muls]
    samples = _samples(planned)
    want = reference_outputs(quantized, samples)
    on_host, on_m4 = _run_both(built, "mul_onnx", samples, tmp_path_factory)
    for w, h, m in zip(want, on_host, on_m4):
        assert np.array_equal(h[0], w[0]) and np.array_equal(m[0], w[0])
