"""The TFLite frontend on files written here: Kiln's exporter, single operators, TFLM's quirks, bad files.

1. Every seeded single-op graph of the TFLM parity sweeps, written by `kiln export`'s writer and
   read back by the frontend, computes TFLM's values bit for bit.
2. TFLM's quirks, each on a file built to meet it: the quantization fields TFLM does not read (a
   bias's, a filter's zero points, an activation's scales past the first), a per-channel effective
   scale below 2^-32 (multiplier 0), a per-tensor fully connected layer whose multiplier differs when formed in
   double or from a float32 product (TFLM: double), FULLY_CONNECTED on a 4-D input with and without keep_num_dims, MEAN over several
   axes with and without keep_dims, and TFLM's fixed-point tables at all 256 inputs.
3. Bad files (truncated, not a flatbuffer, wrong identifier, buffers outside the file, several
   subgraphs, custom and unsupported operators) give one clear error each, never a traceback,
   and `kiln compile` leaves nothing behind; every tensor whose quantization Kiln cannot use is
   named in one line.
"""
from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import flatbuffers
import numpy as np
import pytest
from tflite_micro.python.tflite_micro import runtime
from tflite_micro.tensorflow.lite.micro.compression import model_editor as me
from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as tfl

from test_tflite_parity import SWEEPS, random_feeds, seeded
from kiln.errors import KilnError
from kiln.export.tflite import to_tflite
from kiln.frontends.tflite import import_tflite
from kiln.frontends.tflite.read import read_tflite
from kiln.numerics import tflm
from kiln.reference.executor import run
from kiln.reference.int8 import INT8_IMPLS

ROOT = Path(__file__).resolve().parent.parent
Op = tfl.BuiltinOperator
INT8, INT32, FLOAT32 = tfl.TensorType.INT8, tfl.TensorType.INT32, tfl.TensorType.FLOAT32


def tensor(name: str, shape, dtype=INT8, scale=None, zp=None, data=None, axis: int = 0) -> me.Tensor:
    quant = None
    if scale is not None:
        scales = list(np.atleast_1d(np.asarray(scale, np.float32)).tolist())
        zps = list(np.atleast_1d(zp if zp is not None else np.zeros(len(scales), np.int64)).tolist())
        quant = me.Quantization(scales, zps, axis)
    return me.Tensor(shape=tuple(shape), dtype=dtype, data=None if data is None else np.ascontiguousarray(data), quantization=quant, name=name)


def operator(code: int, inputs, outputs, options: str | None = None, **fields) -> me.Operator:
    op = me.Operator(opcode=code, inputs=inputs, outputs=outputs)
    if options is not None:
        opt = getattr(tfl, f"{options}T")()
        for key, value in fields.items():
            setattr(opt, key, value)
        op._fb.builtinOptionsType = getattr(tfl.BuiltinOptions, options)
        op._fb.builtinOptions = opt
    return op


def model_bytes(ops: list[me.Operator], inputs: list[me.Tensor], outputs: list[me.Tensor]) -> bytes:
    return bytes(me.Model(subgraphs=[me.Subgraph(operators=ops, inputs=inputs, outputs=outputs)]).build())


def write(tmp_path: Path, data: bytes, name: str = "net.tflite") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def compare(path: Path, rows: list[list[np.ndarray]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(Kiln, TFLM) output pairs of the file on each sample."""
    graph = import_tflite(path, "net", {}).graph
    interpreter = runtime.Interpreter.from_bytes(path.read_bytes(), arena_size=1 << 22)
    pairs = []
    for row in rows:
        mine = run(graph, dict(zip(graph.inputs, row)), table=INT8_IMPLS)
        for i, x in enumerate(row):
            interpreter.set_input(np.ascontiguousarray(x), i)
        interpreter.invoke()
        pairs += [(np.asarray(mine[name]), interpreter.get_output(j)) for j, name in enumerate(graph.outputs)]
    return pairs


def assert_exact(pairs: list[tuple[np.ndarray, np.ndarray]]) -> None:
    for mine, theirs in pairs:
        assert mine.shape == theirs.shape and np.array_equal(mine, theirs), f"Kiln {mine.ravel()[:8]} TFLM {theirs.ravel()[:8]}"


# -- 1. files written by Kiln's exporter ---------------------------------------------------------
@pytest.mark.parametrize("op", sorted(SWEEPS))
def test_exported_sweeps_read_back_bit_exact(op: str, tmp_path: Path) -> None:
    for seed in range(12):
        rng = seeded(op, seed)
        graph = SWEEPS[op](rng)
        path = write(tmp_path, to_tflite(graph).model)
        imported = import_tflite(path, "net", {}).graph
        assert imported.meta["quantized_source"] == "tflite"
        rows = [[feeds[name] for name in graph.inputs] for feeds in random_feeds(rng, graph)]
        try:
            assert_exact(compare(path, rows))
        except AssertionError as exc:
            raise AssertionError(f"{op} seed {seed}: {exc}") from None


# -- 2. TFLM's quirks ------------------------------------------------------------------------------
def test_tiny_per_channel_scale_gets_multiplier_zero(tmp_path: Path) -> None:
    """A channel whose input × weight / output scale is below 2^-32 gets multiplier 0 in TFLM: its
    output is the zero point plus nothing, whatever the accumulator (as in real MobileNet files); so
    does a channel whose weight scale is 0."""
    rng = np.random.default_rng(0)
    w = rng.integers(-127, 128, (3, 1, 1, 4)).astype(np.int8)
    scales = [0.02, 2.0**-40, 0.0]  # and a dead channel's scale 0
    x = tensor("x", (1, 2, 2, 4), scale=0.5, zp=3)
    y = tensor("y", (1, 2, 2, 3), scale=0.25, zp=-7)
    ops = [operator(Op.CONV_2D, [x, tensor("w", w.shape, scale=scales, data=w), tensor("b", (3,), INT32, scale=[0.5 * s for s in scales],
                                                                                           data=np.array([100, 2**30, -5], np.int32))],
                    [y], "Conv2DOptions", padding=tfl.Padding.VALID, strideH=1, strideW=1, dilationHFactor=1, dilationWFactor=1)]
    path = write(tmp_path, model_bytes(ops, [x], [y]))
    rows = [[rng.integers(-128, 128, (1, 2, 2, 4)).astype(np.int8)] for _ in range(6)]
    pairs = compare(path, rows)
    assert_exact(pairs)
    assert all(np.all(mine[..., 1:] == -7) for mine, _ in pairs)


def test_per_tensor_fully_connected_multiplier_in_double(tmp_path: Path) -> None:
    """TFLM forms a per-tensor FULLY_CONNECTED's multiplier in double, as Kiln does (TFLite's kernel_util
    has also formed input × weight scale in float32 first). These scales make the two multipliers
    differ; the biases are accumulators at which the rounded results part, inside the int8 range."""
    in_scale, w_scale, out_scale = np.float32(0.0010529801), np.float32(0.014933595), np.float32(0.16639413)
    double = tflm.quantize_multiplier(float(in_scale) * float(w_scale) / float(out_scale))
    single = tflm.quantize_multiplier(float(np.float32(in_scale * w_scale)) / float(out_scale))
    assert double != single
    acc = np.arange(0, int(250 * float(out_scale) / float(in_scale * w_scale)), dtype=np.int64)
    parts = acc[tflm.multiply_by_quantized_multiplier(acc, *double) != tflm.multiply_by_quantized_multiplier(acc, *single)]
    assert parts.size >= 4
    bias = parts[:64].astype(np.int32)
    units = len(bias)
    x = tensor("x", (1, 1), scale=float(in_scale), zp=0)
    y = tensor("y", (1, units), scale=float(out_scale), zp=-128)
    w = tensor("w", (units, 1), scale=float(w_scale), data=np.zeros((units, 1), np.int8))
    b = tensor("b", (units,), INT32, scale=float(in_scale * w_scale), data=bias)
    ops = [operator(Op.FULLY_CONNECTED, [x, w, b], [y], "FullyConnectedOptions")]
    path = write(tmp_path, model_bytes(ops, [x], [y]))
    pairs = compare(path, [[np.zeros((1, 1), np.int8)]])
    assert_exact(pairs)
    assert pairs[0][0].max() < 127, "the parting accumulators must stay inside int8"


def test_quantization_fields_tflm_does_not_read(tmp_path: Path) -> None:
    """TFLM reads a bias's quantization nowhere in an int8 CONV_2D, DEPTHWISE_CONV_2D or per-channel
    FULLY_CONNECTED, a filter's zero points only in a per-tensor FULLY_CONNECTED, an activation's first
    scale and zero point only, and one zero point for all scales; whatever the rest holds, TFLM runs the
    file and Kiln computes what TFLM does. Here: the depthwise bias with per-channel scales along dimension
    3 of its one dimension (TFLM's person_detect.tflite), a conv bias of NaN scales, a bias without any,
    filter zero points that are not 0, one zero point for eight scales, an activation with two scales."""
    rng = np.random.default_rng(7)
    x = tensor("x", (1, 6, 6, 2), scale=0.05, zp=2)
    a = tensor("a", (1, 6, 6, 4))
    a.quantization = me.Quantization([0.08, 7.0], [-3, 99], 3)
    b, y = tensor("b", (1, 6, 6, 8), scale=0.1, zp=5), tensor("y", (1, 3), scale=0.6, zp=-1)
    w1 = tensor("w1", (4, 3, 3, 2), data=rng.integers(-127, 128, (4, 3, 3, 2)).astype(np.int8))
    w1.quantization = me.Quantization(list(rng.uniform(0.005, 0.015, 4)), [1, -2, 3, 4], 0)
    b1 = tensor("b1", (4,), INT32, data=rng.integers(-2000, 2000, 4).astype(np.int32))
    b1.quantization = me.Quantization([math.nan] * 4, [0] * 4, 3)
    w2 = tensor("w2", (1, 3, 3, 8), data=rng.integers(-127, 128, (1, 3, 3, 8)).astype(np.int8))
    w2.quantization = me.Quantization(list(rng.uniform(0.005, 0.015, 8)), [0], 3)
    b2 = tensor("b2", (8,), INT32, scale=[0.0008] * 8, data=rng.integers(-2000, 2000, 8).astype(np.int32), axis=3)
    w3 = tensor("w3", (3, 288), data=rng.integers(-127, 128, (3, 288)).astype(np.int8))
    w3.quantization = me.Quantization([0.01, 0.012, 0.008], [5, 5, 5], 0)
    b3 = tensor("b3", (3,), INT32, data=rng.integers(-2000, 2000, 3).astype(np.int32))
    window = dict(padding=tfl.Padding.SAME, strideH=1, strideW=1, dilationHFactor=1, dilationWFactor=1)
    ops = [operator(Op.CONV_2D, [x, w1, b1], [a], "Conv2DOptions", **window),
           operator(Op.DEPTHWISE_CONV_2D, [a, w2, b2], [b], "DepthwiseConv2DOptions", depthMultiplier=2, **window),
           operator(Op.FULLY_CONNECTED, [b, w3, b3], [y], "FullyConnectedOptions")]
    path = write(tmp_path, model_bytes(ops, [x], [y]))
    rows = [[rng.integers(-128, 128, (1, 6, 6, 2)).astype(np.int8)] for _ in range(6)]
    pairs = compare(path, rows)
    assert_exact(pairs)
    assert len({mine.tobytes() for mine, _ in pairs}) == len(rows)  # outputs that depend on the input


@pytest.mark.parametrize("keep", [False, True])
def test_fully_connected_on_a_4d_input(tmp_path: Path, keep: bool) -> None:
    """TFLM flattens the input to rows of in_features; keep_num_dims only shapes the output."""
    rng = np.random.default_rng(int(keep))
    x = tensor("x", (2, 3, 2, 5), scale=0.1, zp=-4)
    w = tensor("w", (4, 5), scale=[0.01, 0.02, 0.03, 0.04], data=rng.integers(-127, 128, (4, 5)).astype(np.int8))
    y = tensor("y", (2, 3, 2, 4) if keep else (12, 4), scale=0.07, zp=9)
    ops = [operator(Op.FULLY_CONNECTED, [x, w, None], [y], "FullyConnectedOptions", keepNumDims=keep,
                    fusedActivationFunction=tfl.ActivationFunctionType.RELU_N1_TO_1)]
    path = write(tmp_path, model_bytes(ops, [x], [y]))
    assert_exact(compare(path, [[rng.integers(-128, 128, (2, 3, 2, 5)).astype(np.int8)] for _ in range(6)]))


@pytest.mark.parametrize("axes,keep", [([1, 2], True), ([1, 2], False), ([3], False), ([0, 1], True), ([2, -1], False)])
def test_mean(tmp_path: Path, axes: list[int], keep: bool) -> None:
    """TFLM's int8 MEAN (1/count folded into the multiplier), with other output parameters than the input's."""
    rng = np.random.default_rng(len(axes) + keep)
    shape = (2, 5, 7, 3)
    reduced = {a % 4 for a in axes}
    out = tuple(1 if i in reduced else d for i, d in enumerate(shape) if keep or i not in reduced)
    x, y = tensor("x", shape, scale=0.043, zp=-17), tensor("y", out, scale=0.011, zp=21)
    ops = [operator(Op.MEAN, [x, tensor("axes", (len(axes),), INT32, data=np.array(axes, np.int32))], [y], "ReducerOptions", keepDims=keep)]
    path = write(tmp_path, model_bytes(ops, [x], [y]))
    assert_exact(compare(path, [[rng.integers(-128, 128, shape).astype(np.int8)] for _ in range(6)]))


TABLE_OPS = {
    "LOGISTIC": (Op.LOGISTIC, None, {}, lambda s, z, so, zo: tflm.logistic_table(s, z), (1 / 256, -128)),
    "TANH": (Op.TANH, None, {}, lambda s, z, so, zo: tflm.tanh_table(s, z), (1 / 128, 0)),
    "HARD_SWISH": (Op.HARD_SWISH, None, {}, tflm.hard_swish_table, None),
    "LEAKY_RELU": (Op.LEAKY_RELU, "LeakyReluOptions", {"alpha": 0.2}, lambda *q: tflm.leaky_relu_table(*q, 0.2), None),
    "RELU": (Op.RELU, None, {}, tflm.relu_table, None),
    "RELU6": (Op.RELU6, None, {}, lambda s, z, so, zo: tflm.relu6_table(s, z), None),
    "QUANTIZE": (Op.QUANTIZE, None, {}, tflm.requantize_table, None),
}


@pytest.mark.parametrize("name", sorted(TABLE_OPS))
def test_tables_equal_tflm_at_every_input(name: str) -> None:
    """TFLM's int8 elementwise kernels, run at all 256 inputs for seeded parameters (power-of-two scales
    and extreme zero points included), equal Kiln's tables of them."""
    code, options, fields, table, fixed = TABLE_OPS[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    for trial in range(25):
        s_in = float(np.float32(2.0 ** round(math.log2(10 ** rng.uniform(-3, 1))) if trial % 4 == 0 else 10 ** rng.uniform(-3, 1)))
        zp = int(rng.choice([-128, 127, int(rng.integers(-128, 128))]))
        s_out, zo = fixed or (float(np.float32(s_in * 10 ** rng.uniform(-0.7, 0.7))), int(rng.integers(-128, 128)))
        try:
            mine = table(s_in, zp, s_out, zo)
        except ValueError:
            continue  # scales TFLM's Prepare refuses (HARD_SWISH with an output multiplier above 1)
        x, y = tensor("x", (1, 256), scale=s_in, zp=zp), tensor("y", (1, 256), scale=s_out, zp=zo)
        interpreter = runtime.Interpreter.from_bytes(model_bytes([operator(code, [x], [y], options, **fields)], [x], [y]), arena_size=1 << 16)
        interpreter.set_input(np.arange(-128, 128, dtype=np.int8).reshape(1, 256), 0)
        interpreter.invoke()
        theirs = interpreter.get_output(0).ravel()
        assert np.array_equal(mine, theirs), f"{name} trial {trial}: first difference at input {np.flatnonzero(mine != theirs)[0] - 128}"


# -- 3. bad files ----------------------------------------------------------------------------------
def simple_model() -> bytes:
    x, y = tensor("x", (1, 4), scale=0.1, zp=0), tensor("y", (1, 4), scale=0.1, zp=0)
    w = tensor("w", (4, 4), scale=0.05, data=np.eye(4, dtype=np.int8))
    return model_bytes([operator(Op.FULLY_CONNECTED, [x, w, None], [y], "FullyConnectedOptions")], [x], [y])


def repacked(edit) -> bytes:
    model = tfl.ModelT.InitFromPackedBuf(simple_model(), 0)
    edit(model)
    builder = flatbuffers.Builder(0)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _outside(model) -> None:
    model.buffers[-1].data = None
    model.buffers[-1].offset, model.buffers[-1].size = 1 << 20, 16


def _two_subgraphs(model) -> None:
    model.subgraphs.append(model.subgraphs[0])


def _custom(model) -> None:
    code = tfl.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = tfl.BuiltinOperator.CUSTOM
    code.customCode = b"MyOp"
    model.operatorCodes.append(code)
    model.subgraphs[0].operators[0].opcodeIndex = len(model.operatorCodes) - 1


BAD_FILES = {
    "empty": (lambda: b"", "too short"),
    "truncated": (lambda: simple_model()[: len(simple_model()) // 3], "corrupt or truncated|outside the file|buffer holds"),
    "not a flatbuffer": (lambda: b"\xff\xff\xff\x7fTFL3" + bytes(range(256)) * 4, "corrupt or truncated"),
    "wrong identifier": (lambda: simple_model()[:4] + b"ONNX" + simple_model()[8:], "not a TFLite file"),
    "buffer outside the file": (lambda: repacked(_outside), "outside the file"),
    "several subgraphs": (lambda: repacked(_two_subgraphs), "2 subgraphs"),
    "custom operator": (lambda: repacked(_custom), r"operator 0 CUSTOM\(MyOp\): custom operators are not supported"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_file_one_clear_error(case: str, tmp_path: Path) -> None:
    make, message = BAD_FILES[case]
    path = write(tmp_path, make())
    with pytest.raises(KilnError, match=message):
        import_tflite(path, "net", {})
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "kiln", "compile", str(path), "-o", str(out)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and proc.stderr.startswith("kiln: error: "), proc.stderr
    assert not any(p.suffix in (".kir", ".c", ".h") for p in out.rglob("*"))


def test_every_tensor_with_unusable_quantization_in_one_line(tmp_path: Path) -> None:
    """The quantization Kiln reads (as TFLM does) is checked for every tensor before any operator: a filter
    with 3 scales for 4 output channels and one whose scales lie along a dimension of another size (TFLM
    refuses both), an activation whose scale is NaN, one with scales but no zero points (TFLM reads no
    quantization then), and a per-tensor FULLY_CONNECTED filter with zero point 3 (TFLM subtracts it; Kiln's
    kernels take symmetric weights) are named in one line, each with its index and reason."""
    rng = np.random.default_rng(3)
    x = tensor("x", (1, 4, 4, 2), scale=0.05, zp=0)
    a = tensor("a", (1, 4, 4, 4), scale=math.nan, zp=0)
    b = tensor("b", (1, 4, 4, 4), scale=0.1, zp=0)
    c = tensor("c", (1, 2))
    c.quantization = me.Quantization([0.2], [], None)
    w1 = tensor("w1", (4, 3, 3, 2), scale=[0.01, 0.02, 0.03], data=rng.integers(-127, 128, (4, 3, 3, 2)).astype(np.int8))
    w2 = tensor("w2", (1, 3, 3, 4), scale=[0.01] * 4, data=rng.integers(-127, 128, (1, 3, 3, 4)).astype(np.int8), axis=1)
    w3 = tensor("w3", (2, 64), scale=0.01, zp=3, data=rng.integers(-127, 128, (2, 64)).astype(np.int8))
    window = dict(padding=tfl.Padding.SAME, strideH=1, strideW=1, dilationHFactor=1, dilationWFactor=1)
    ops = [operator(Op.CONV_2D, [x, w1, None], [a], "Conv2DOptions", **window),
           operator(Op.DEPTHWISE_CONV_2D, [a, w2, None], [b], "DepthwiseConv2DOptions", depthMultiplier=1, **window),
           operator(Op.FULLY_CONNECTED, [b, w3, None], [c], "FullyConnectedOptions")]
    path = write(tmp_path, model_bytes(ops, [x], [c]))
    with pytest.raises(RuntimeError):
        runtime.Interpreter.from_bytes(path.read_bytes(), arena_size=1 << 20)
    index = {t.name: t.index for t in read_tflite(path).tensors}
    with pytest.raises(KilnError) as info:
        import_tflite(path, "net", {})
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: 5 tensor(s) with quantization Kiln cannot use: "), message
    assert message.count("; tensor ") == 4
    for name, reason in [("w1", "(filter of operator 0 CONV_2D): 3 scales for a filter of shape [4, 3, 3, 2]"),
                         ("a", "scales [nan] must be finite"),
                         ("w2", "(filter of operator 1 DEPTHWISE_CONV_2D): 4 scales along dimension 1 of shape [1, 3, 3, 4]"),
                         ("w3", "(filter of operator 2 FULLY_CONNECTED): zero point 3"),
                         ("c", "INT8 without quantization parameters")]:
        assert f"tensor {index[name]} {name!r}{' ' if reason.startswith('(') else ': '}{reason}" in message, (name, message)
    assert all(f"{n!r}" not in message for n in ("x", "b"))


def test_every_unsupported_operator_listed_at_once(tmp_path: Path) -> None:
    """Each unsupported operator, type or option is one line naming its index, operator and reason."""
    x = tensor("x", (1, 4, 4, 2), scale=0.1, zp=0)
    a = tensor("a", (1, 4, 4, 2), scale=0.1, zp=0)
    b = tensor("b", (1, 4, 4, 2), tfl.TensorType.INT16, scale=0.1, zp=0)
    c = tensor("c", (1, 4, 4, 2), scale=0.1, zp=0)
    d = tensor("d", (1, 4, 4, 2), scale=0.1, zp=0)
    ops = [operator(Op.ADD, [x, x], [a], "AddOptions", fusedActivationFunction=tfl.ActivationFunctionType.TANH),
           operator(Op.QUANTIZE, [a], [b]),
           operator(Op.FLOOR, [x], [c]),
           operator(Op.CONCATENATION, [a, c], [d], "ConcatenationOptions", axis=3, fusedActivationFunction=tfl.ActivationFunctionType.RELU)]
    d.shape = (1, 4, 4, 4)
    path = write(tmp_path, model_bytes(ops, [x], [d]))
    with pytest.raises(KilnError) as info:
        import_tflite(path, "net", {})
    lines = str(info.value).splitlines()
    assert lines[0].endswith("4 operator(s) cannot be imported:")
    assert lines[1] == "operator 0 ADD: fused activation TANH is not supported"
    assert lines[2].startswith("operator 1 QUANTIZE: quantizes INT8 to INT16")
    assert lines[3] == "operator 2 FLOOR: operator not supported by Kiln"
    assert lines[4] == "operator 3 CONCATENATION: a fused activation on CONCATENATION is not supported"


def test_quantized_graph_passes_normalize_and_quantize_unchanged(tmp_path: Path) -> None:
    """A quantized file is int8 from the import on: normalize only orders it canonically, quantize keeps
    it without calibration, and asking for the float path is an error."""
    from kiln.ir.serialize import dumps
    from kiln.normalize import normalize
    from kiln.normalize.manager import canonicalize
    from kiln.quantize import quantize

    graph = import_tflite(write(tmp_path, simple_model()), "net", {}).graph
    normalized = normalize(graph, {})
    assert dumps(normalized) == dumps(canonicalize(graph))
    defaults = {"mode": "int8", "observer": "minmax", "percentile": 99.99, "averaging_constant": 0.01, "per_channel": True,
                "calibration": [], "max_samples": 256, "seed": 0}
    assert dumps(quantize(normalized, defaults, {})) == dumps(normalized)
    with pytest.raises(KilnError, match="already quantized"):
        quantize(normalized, dict(defaults, mode="none"), {})
