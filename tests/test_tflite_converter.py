"""Files from TensorFlow's own TFLite converter, compiled by Kiln, against TFLite Micro.

`tests/tflite_convert.py` builds seeded Keras models covering the TFLite frontend's operators
and options (SAME padding with odd totals, dilation, depth multiplier 2, non-square average
pools, FULLY_CONNECTED on a 4-D input with and without keep_num_dims, MEAN, fused RELU/RELU6,
LOGISTIC, TANH, HARD_SWISH, LEAKY_RELU, MAXIMUM/MINIMUM, PAD/PADV2, STRIDED_SLICE with a negative
stride, SPLIT, TRANSPOSE, RESIZE_NEAREST_NEIGHBOR with and without align_corners...) and converts
each with `representative_dataset` as full-integer (int8 io, float io around the int8 body, and
for two cases uint8 io),
float and dynamic-range "hybrid". It runs once per test session in the TensorFlow environment
scripts/setup.sh creates (`.venv-tf`).

- Quantized files: every activation tensor of Kiln's integer reference equals TFLM's (reference
  kernels, every tensor preserved), bit for bit, on int8 extremes and random samples; the
  generated C, compiled and run, gives the same outputs.
- Float files import as float graphs whose float reference agrees with TFLM's float kernels up
  to float32 summation order. Hybrid files (which TFLM does not run: it has no hybrid kernels)
  import with their int8 weights dequantized exactly (scale × q), said in the graph's meta. Kiln's
  own calibration and quantization compile both.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from tflite_micro.python.tflite_micro import runtime

from kiln import config as model_config
from kiln.frontends.tflite import import_tflite
from kiln.frontends.tflite.convert import Converter
from kiln.frontends.tflite.read import read_tflite
from kiln.ir.graph import Graph
from kiln.reference.executor import run
from kiln.reference.int8 import INT8_IMPLS
from kiln.runner import run_stage
from kiln.stages import STAGES

ROOT = Path(__file__).resolve().parent.parent
CASES = ("conv_stack", "pooling", "dense_4d", "elementwise", "movement")
SAMPLES = 12


def samples_for(graph: Graph, calibration: np.ndarray, rng: np.random.Generator) -> list[list[np.ndarray]]:
    """int8 inputs: the extremes, then uniform values; float inputs: the calibration samples, one scaled to saturate."""
    rows = []
    for i in range(SAMPLES):
        row = []
        for name in graph.inputs:
            t = graph.tensors[name]
            if t.dtype in ("int8", "uint8"):
                info = np.iinfo(t.dtype)
                row.append(np.full(t.shape, (info.min, info.max)[i % 2], t.dtype) if i < 2 else rng.integers(info.min, info.max + 1, t.shape).astype(t.dtype))
            else:
                row.append((calibration[i % len(calibration)] * (8.0 if i == 0 else 1.0)).astype(np.float32).reshape(t.shape))
        rows.append(row)
    return rows


def tflm_tensors(model: bytes, row: list[np.ndarray], indices: list[int]) -> dict[int, np.ndarray]:
    interpreter = runtime.Interpreter.from_bytes(model, arena_size=1 << 22, intrepreter_config=runtime.InterpreterConfig.kPreserveAllTensors)
    for i, x in enumerate(row):
        interpreter.set_input(np.ascontiguousarray(x), i)
    interpreter.invoke()
    return {i: np.array(interpreter.GetTensor(i, 0)["tensor_data"]) for i in indices}


def bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.int32) if a.dtype == np.float32 else a.astype(np.int64)


@pytest.mark.parametrize("case,form", [(c, f) for c in CASES for f in ("int8", "int8_float_io")] + [("conv_stack", "uint8"), ("pooling", "uint8")])
def test_quantized_file_bit_exact(converted: Path, case: str, form: str) -> None:
    path = converted / f"{case}.{form}.tflite"
    graph = import_tflite(path, case, {}).graph
    assert graph.meta["tflite"] == "int8" and graph.meta["quantized_source"] == "tflite"
    names = Converter(read_tflite(path), Graph(case)).names
    index = {name: i for i, name in names.items() if name in graph.tensors and not graph.tensors[name].is_constant}
    calibration = np.load(converted / f"{case}.calibration.npy")
    compared = 0
    for row in samples_for(graph, calibration, np.random.default_rng(len(case))):
        mine = run(graph, dict(zip(graph.inputs, row)), table=INT8_IMPLS, keep=True)
        theirs = tflm_tensors(path.read_bytes(), row, sorted(index.values()))
        for name, i in index.items():
            a, b = np.asarray(mine[name]), theirs[i]
            diff = np.flatnonzero(bits(a).ravel() != bits(b).ravel())
            assert diff.size == 0, f"{case}.{form}: tensor {name!r}: {diff.size} of {a.size} values differ, first Kiln {a.ravel()[diff[0]]}, TFLM {b.ravel()[diff[0]]}"
            compared += a.size
    assert compared > 1000


@pytest.mark.parametrize("case,form", [(c, "int8") for c in CASES] + [("pooling", "int8_float_io"), ("movement", "int8_float_io"), ("conv_stack", "uint8")])
def test_quantized_file_generated_c(converted: Path, case: str, form: str, tmp_path: Path) -> None:
    """`kiln compile` of the quantized file, built with AddressSanitizer and UBSan and run on the host, gives
    TFLM's outputs (float ones bit for bit)."""
    from kiln import host

    path = converted / f"{case}.{form}.tflite"
    cfg = model_config.validate({"model": {"source": path.name}}, str(path))
    for st in STAGES:
        run_stage(st.name, case, converted, cfg, tmp_path)
    from kiln.ir import load

    graph = load(tmp_path / "planned.kir")
    model = read_tflite(path)
    for node in graph.nodes:  # each layer keeps the name Netron gives its operator: its output tensor's
        index = int(re.fullmatch(r"operator (\d+) \S+", node.source).group(1))
        assert node.source_name == model.tensors[model.operators[index].outputs[0]].name != "", node
    source = tmp_path / f"{case}.c"
    exe = host.build_executable([source], [host.model_prefix(source.with_suffix(".h"))], tmp_path / "host_model", sanitize=True)
    rows = samples_for(graph, np.load(converted / f"{case}.calibration.npy"), np.random.default_rng(3))
    outs = host.run_executable(exe, graph, rows)
    interpreter = runtime.Interpreter.from_bytes(path.read_bytes(), arena_size=1 << 22)
    for row, out in zip(rows, outs):
        for i, x in enumerate(row):
            interpreter.set_input(x, i)
        interpreter.invoke()
        for j, y in enumerate(out):
            assert np.array_equal(bits(y).reshape(-1), bits(interpreter.get_output(j)).reshape(-1)), f"{case}.{form}: output {j} differs from TFLM"


@pytest.mark.parametrize("case,form", [(c, "float") for c in CASES] + [("dense_4d", "hybrid")])
def test_float_file(converted: Path, case: str, form: str, tmp_path: Path) -> None:
    path = converted / f"{case}.{form}.tflite"
    graph = import_tflite(path, case, {}).graph
    assert graph.meta["tflite"] == form
    assert all(t.dtype == "float32" for t in graph.tensors.values() if not t.is_constant)
    calibration = np.load(converted / f"{case}.calibration.npy")
    if form == "hybrid":
        check_dequantized_weights(path, graph)
    else:
        check_float_outputs(path, graph, calibration)
    cfg = model_config.validate({"model": {"source": path.name}, "quant": {"calibration": [str(converted / f"{case}.calibration.npy")]}}, str(path))
    for name in ("import", "normalize", "quantize", "lower"):
        run_stage(name, case, converted, cfg, tmp_path)


def check_dequantized_weights(path: Path, graph: Graph) -> None:
    """Every int8 constant of the file is in the graph as float32 scale × (q − zero point), exactly."""
    model = read_tflite(path)
    names = Converter(model, Graph("g")).names
    found = 0
    for t in model.tensors:
        if t.type == "INT8" and t.data is not None:
            shape = [1] * len(t.shape)
            if t.quant.axis is not None:
                shape[t.quant.axis] = -1
            want = (t.quant.scale.reshape(shape) * (t.data.astype(np.float32) - t.quant.zero_point.reshape(shape))).astype(np.float32)
            assert np.array_equal(graph.tensors[f"{names[t.index]}_float"].data, want)
            found += 1
    assert found > 0


def check_float_outputs(path: Path, graph: Graph, calibration: np.ndarray) -> None:
    interpreter = runtime.Interpreter.from_bytes(path.read_bytes(), arena_size=1 << 22)
    for sample in calibration[:4]:
        x = sample.reshape(graph.tensors[graph.inputs[0]].shape)
        mine = np.asarray(run(graph, {graph.inputs[0]: x})[graph.outputs[0]])
        interpreter.set_input(x, 0)
        interpreter.invoke()
        theirs = interpreter.get_output(0)
        # Only the order of float32 sums differs (dot products of at most a few hundred terms):
        # a relative error of a few float32 ulps of the largest value, far below 1e-4.
        assert np.allclose(mine, theirs, rtol=1e-4, atol=1e-4 * float(np.abs(theirs).max()) + 1e-7), path.name
