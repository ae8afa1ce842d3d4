"""TFLite operators into Kiln kernel ops (NHWC, as the file has them), keeping what TFLM computes.

An int8 operator keeps the file's tensors, scales, zero points, int32 biases and fused
activation exactly; where Kiln's own int8 arithmetic differs from TFLite Micro's, the node
carries TFLM's: elementwise int8 ops get a `lut` attribute (TFLM's result at each of the 256
inputs, `kiln.numerics.tflm`), MEAN becomes `mean`, TFLM's kernel. A float operator becomes
the same kernel op in float; int8 or float16 constants feeding float ops (dynamic-range
"hybrid" files, float16 weights) are dequantized to float32.

Each handler raises `Unsupported` with a one-line reason; the importer lists every operator
that cannot be imported at once.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from kiln.frontends.tflite.read import ACTIVATIONS, TflModel, TflOperator, TflTensor, tfl
from kiln.ir.graph import Graph, Node, QuantParams, Tensor
from kiln.ir.kernel_ops import mean_split
from kiln.ir.ops import OpError
from kiln.numerics import tflm
from kiln.numerics.fixedpoint import quantize_value, round_half_away

# INT4 constants are unpacked on reading; UINT8 tensors are model inputs and outputs around a QUANTIZE.
KIR_TYPES = {"FLOAT32": "float32", "INT8": "int8", "INT32": "int32", "INT4": "int8", "UINT8": "uint8"}
FUSED = {"NONE": (-math.inf, math.inf), "RELU": (0.0, math.inf), "RELU6": (0.0, 6.0), "RELU_N1_TO_1": (-1.0, 1.0), "RELU_0_TO_1": (0.0, 1.0)}


class Unsupported(Exception):
    """An operator Kiln cannot import; the message is the reason."""


class Converter:
    """The Kiln graph being built from one TFLite subgraph."""

    def __init__(self, model: TflModel, graph: Graph) -> None:
        self.model = model
        self.graph = graph
        self.names: dict[int, str] = {}
        self.hybrid = False
        taken: set[str] = set()
        for t in model.tensors:
            name = t.name if t.name and t.name not in taken else f"{t.name or 'tensor'}_{t.index}"
            taken.add(name)
            self.names[t.index] = name

    # -- tensors ---------------------------------------------------------------
    def info(self, index: int) -> TflTensor:
        return self.model.tensors[index]

    def name(self, index: int) -> str:
        """The Kiln tensor of TFLite tensor `index`, created on first use with the file's type, parameters and data."""
        name = self.names[index]
        if name not in self.graph.tensors:
            t = self.info(index)
            dtype = KIR_TYPES.get(t.type)
            if dtype is None:
                raise Unsupported(f"tensor {index} {t.name!r} is {t.type} (Kiln reads float32, int8 and int32 tensors)")
            quant = None
            if t.quant is not None:  # as TFLM reads it (kiln.frontends.tflite.quant): a scale 0 only on a constant
                # A dead channel's scale 0 gives TFLM multiplier 0; the smallest float32 gives the same.
                scale = np.where(t.quant.scale == 0, np.float32(np.finfo(np.float32).smallest_subnormal), t.quant.scale)
                quant = QuantParams(tuple(scale.tolist()), tuple(t.quant.zero_point.tolist()), t.quant.axis)
            self.graph.add_tensor(Tensor(name, t.shape, dtype, layout="", quant=quant, data=t.data))
        return name

    def float_constant(self, index: int, what: str) -> str:
        """A constant as float32: int8 (hybrid weights) and float16 ones dequantized."""
        t = self.info(index)
        if t.data is None:
            raise Unsupported(f"{what} (tensor {index}) must be a constant")
        if t.type == "FLOAT32":
            return self.name(index)
        if t.type == "INT8" and t.quant is not None:
            self.hybrid = True
            values = dequantize(t)
        elif t.type == "FLOAT16":
            values = t.data.astype(np.float32)
        else:
            raise Unsupported(f"{what} (tensor {index}) is {t.type}; a float operator needs float32, float16 or quantized int8 constants")
        name = f"{self.names[index]}_float"
        if name not in self.graph.tensors:
            self.graph.add_tensor(Tensor(name, t.shape, "float32", data=values))
        return name

    def ints(self, index: int, what: str) -> list[int]:
        t = self.info(index)
        if t.data is None or t.type not in ("INT32", "INT64"):
            raise Unsupported(f"{what} (tensor {index}) must be a constant int32 or int64 tensor")
        return [int(v) for v in t.data.ravel()]

    def emit(self, op: TflOperator, kind: str, inputs: list[str], outputs: list[str], attrs: dict | None = None, part: str = "") -> None:
        """A node for (part of) operator `op`, named in the source as Netron names the operator: by its output tensor."""
        name = f"{op.code.lower()}_{op.index}" + (f"_{part}" if part else "")
        source_name = self.info(op.outputs[0]).name if op.outputs else ""
        self.graph.nodes.append(Node(self.graph.unique_node_name(name), kind, inputs, outputs, attrs or {},
                                     source=f"operator {op.index} {op.code}", source_name=source_name))

    def temp(self, like: int, shape: tuple[int, ...], suffix: str) -> str:
        """A new activation tensor with tensor `like`'s type and parameters and another shape."""
        t = self.graph.tensors[self.name(like)]
        return self.graph.add_tensor(t.copy(name=self.graph.unique_tensor_name(f"{t.name}_{suffix}"), shape=shape, data=None)).name


def dequantize(t: TflTensor) -> np.ndarray:
    """scale · (q − zero_point) in float32, per channel along the quantized axis."""
    shape = [1] * len(t.shape)
    if t.quant.axis is not None:
        shape[t.quant.axis] = -1
    scale = t.quant.scale.reshape(shape) if t.quant.axis is not None else t.quant.scale[0]
    zp = t.quant.zero_point.reshape(shape) if t.quant.axis is not None else t.quant.zero_point[0]
    return (np.float32(1) * scale * (t.data.astype(np.int64) - zp).astype(np.float32)).astype(np.float32)


# -- helpers -----------------------------------------------------------------------------------
def _activation(op: TflOperator) -> dict[str, float]:
    code = getattr(op.options, "fusedActivationFunction", 0) if op.options is not None else 0
    name = ACTIVATIONS.get(code, str(code))
    if name not in FUSED:
        raise Unsupported(f"fused activation {name} is not supported")
    lo, hi = FUSED[name]
    return {"act_min": lo, "act_max": hi}


def _is_int8(cx: Converter, index: int) -> bool:
    return cx.info(index).type == "INT8"


def _expect(cx: Converter, op: TflOperator, n_in: int, n_out: int = 1) -> None:
    have = [i for i in op.inputs if i >= 0]
    if len(op.inputs) < n_in or len(have) < n_in:
        raise Unsupported(f"expects {n_in} inputs, has {len(have)}")
    if len(op.outputs) != n_out:
        raise Unsupported(f"expects {n_out} outputs, has {len(op.outputs)}")


def _same_params(cx: Converter, op: TflOperator, ins: list[int], out: int) -> None:
    """Ops whose TFLM kernel copies int8 bytes: Kiln needs the parameters the kernel assumes."""
    want = cx.info(out).quant
    for i in ins:
        q = cx.info(i).quant
        if _is_int8(cx, i) and (q is None or want is None or not (np.array_equal(q.scale, want.scale) and np.array_equal(q.zero_point, want.zero_point))):
            raise Unsupported(f"input tensor {i} has other quantization parameters than output {out} "
                              "(TFLM copies the int8 bytes unchanged; Kiln needs them equal for this op)")


def _check_types(cx: Converter, op: TflOperator, indices: list[int]) -> None:
    types = {cx.info(i).type for i in indices if cx.info(i).data is None}
    if len(types) > 1:
        raise Unsupported(f"mixes {' and '.join(sorted(types))} activations")
    bad = types - {"INT8", "FLOAT32"}
    if bad:
        raise Unsupported(f"computes on {bad.pop()} activations (Kiln runs int8 and float32)")


def _padding(op: TflOperator, in_hw: tuple[int, int], kernel: tuple[int, int], strides: tuple[int, int],
             dilations: tuple[int, int], out_hw: tuple[int, int]) -> list[int]:
    """Kiln pads [top, left, bottom, right] for TFLite SAME/VALID, as TFLM's `ComputePaddingHeightWidth`."""
    same = op.options.padding == tfl.Padding.SAME
    pads, sizes = [], []
    for size, k, s, d in zip(in_hw, kernel, strides, dilations):
        span = (k - 1) * d + 1
        out = (size + s - 1) // s if same else (size + s - span) // s
        total = max((out - 1) * s + span - size, 0) if same else 0
        pads.append((total // 2, total - total // 2))
        sizes.append(out)
    if tuple(sizes) != tuple(out_hw):
        raise Unsupported(f"output height/width {list(out_hw)} differ from the {'SAME' if same else 'VALID'} padding's {sizes}")
    return [pads[0][0], pads[1][0], pads[0][1], pads[1][1]]


def _bias(cx: Converter, op: TflOperator, int8: bool) -> list[str]:
    if len(op.inputs) < 3 or op.inputs[2] < 0:
        return []
    b = cx.info(op.inputs[2])
    if b.data is None:
        raise Unsupported(f"bias (tensor {b.index}) must be a constant")
    if int8:
        if b.type != "INT32":
            raise Unsupported(f"bias (tensor {b.index}) is {b.type}; int8 kernels take an int32 bias")
        return [cx.name(b.index)]
    return [cx.float_constant(b.index, "bias")]


def _weights(cx: Converter, op: TflOperator, int8: bool) -> str:
    w = cx.info(op.inputs[1])
    if w.data is None:
        raise Unsupported(f"weights (tensor {w.index}) must be a constant")
    if not int8:
        return cx.float_constant(w.index, "weights")
    if w.type not in ("INT8", "INT4"):
        raise Unsupported(f"weights (tensor {w.index}) are {w.type}; int8 kernels take quantized int8 (or int4) weights")
    return cx.name(w.index)  # symmetric, one scale or one per output channel (kiln.frontends.tflite.quant)


def _activation_input(cx: Converter, op: TflOperator) -> tuple[int, bool]:
    x = op.inputs[0]
    _check_types(cx, op, [x] + op.outputs)
    return x, _is_int8(cx, x)


# -- handlers ----------------------------------------------------------------------------------
Handler = Callable[[Converter, TflOperator], None]
HANDLERS: dict[str, Handler] = {}


def handles(*codes: str):
    def register(fn: Handler) -> Handler:
        for code in codes:
            HANDLERS[code] = fn
        return fn

    return register


@handles("CONV_2D", "DEPTHWISE_CONV_2D")
def _conv(cx: Converter, op: TflOperator) -> None:
    _expect(cx, op, 2)
    x, int8 = _activation_input(cx, op)
    xs, ws, ys = cx.info(x).shape, cx.info(op.inputs[1]).shape, cx.info(op.outputs[0]).shape
    if len(xs) != 4 or len(ws) != 4 or len(ys) != 4:
        raise Unsupported(f"expects 4-D input, weights and output, got {list(xs)}, {list(ws)}, {list(ys)}")
    o = op.options
    strides, dilations = (o.strideH, o.strideW), (o.dilationHFactor, o.dilationWFactor)
    attrs = {"strides": list(strides), "dilations": list(dilations), **_activation(op)}
    if op.code == "CONV_2D":
        if ws[3] != xs[3]:
            raise Unsupported(f"grouped convolution (weights take {ws[3]} channels, the input has {xs[3]})")
        kind = "conv2d"
    else:
        if ws[0] != 1 or ws[3] % xs[3]:
            raise Unsupported(f"depthwise weights {list(ws)} do not fit an input of {xs[3]} channels")
        mult = ws[3] // xs[3]
        if o.depthMultiplier not in (0, mult):
            raise Unsupported(f"depth_multiplier {o.depthMultiplier} disagrees with the weights' {mult}")
        kind = "depthwise_conv2d"
        attrs["depth_multiplier"] = mult
    attrs["pads"] = _padding(op, xs[1:3], ws[1:3], strides, dilations, ys[1:3])
    inputs = [cx.name(x), _weights(cx, op, int8)] + _bias(cx, op, int8)
    cx.emit(op, kind, inputs, [cx.name(op.outputs[0])], attrs)


@handles("FULLY_CONNECTED")
def _fully_connected(cx: Converter, op: TflOperator) -> None:
    """TFLM flattens the input to (size / in_features, in_features); keep_num_dims only shapes the output."""
    _expect(cx, op, 2)
    x, int8 = _activation_input(cx, op)
    if op.options is not None and op.options.weightsFormat != 0:
        raise Unsupported("shuffled weights (weights_format SHUFFLED4x16INT8) are not supported")
    ws = cx.info(op.inputs[1]).shape
    xs, ys = cx.info(x).shape, cx.info(op.outputs[0]).shape
    if len(ws) != 2 or int(np.prod(xs)) % ws[1]:
        raise Unsupported(f"weights {list(ws)} do not fit input {list(xs)}")
    rows = int(np.prod(xs)) // ws[1]
    if int(np.prod(ys)) != rows * ws[0]:
        raise Unsupported(f"output {list(ys)} is not {rows} rows of {ws[0]} units")
    src = cx.name(x)
    if xs != (rows, ws[1]):
        src = cx.temp(x, (rows, ws[1]), "rows")
        cx.emit(op, "reshape", [cx.name(x)], [src], {"shape": [rows, ws[1]]}, "rows")
    dst = cx.name(op.outputs[0])
    if ys != (rows, ws[0]):
        dst = cx.temp(op.outputs[0], (rows, ws[0]), "rows")
    cx.emit(op, "fully_connected", [src, _weights(cx, op, int8)] + _bias(cx, op, int8), [dst], _activation(op))
    if dst != cx.name(op.outputs[0]):
        cx.emit(op, "reshape", [dst], [cx.name(op.outputs[0])], {"shape": list(ys)}, "shape")


@handles("ADD", "SUB", "MUL")
def _binary(cx: Converter, op: TflOperator) -> None:
    _expect(cx, op, 2)
    _check_types(cx, op, op.inputs[:2] + op.outputs)
    int8 = _is_int8(cx, op.outputs[0])
    ins = []
    for i in op.inputs[:2]:
        t = cx.info(i)
        if t.data is not None and not int8:
            ins.append(cx.float_constant(i, "operand"))
        elif t.type != ("INT8" if int8 else "FLOAT32"):
            raise Unsupported(f"operand tensor {i} is {t.type}")
        else:
            ins.append(cx.name(i))
    cx.emit(op, op.code.lower(), ins, [cx.name(op.outputs[0])], _activation(op))


@handles("BATCH_MATMUL")
def _batch_matmul(cx: Converter, op: TflOperator) -> None:
    """Products of two tensors (attention): TFLM's BATCH_MATMUL, its fused activation none; operands not transposed."""
    _expect(cx, op, 2)
    _check_types(cx, op, op.inputs[:2] + op.outputs)
    if op.options is not None and (op.options.adjX or op.options.adjY):
        raise Unsupported("adj_x / adj_y (a transposed operand) is not supported")
    a, b = (cx.info(i).shape for i in op.inputs[:2])
    if len(a) != len(b) or a[:-2] != b[:-2]:
        raise Unsupported(f"operands {list(a)} and {list(b)}: Kiln needs equal batch dimensions (no broadcasting)")
    cx.emit(op, "batch_matmul", [cx.name(i) for i in op.inputs[:2]], [cx.name(op.outputs[0])], {})


@handles("AVERAGE_POOL_2D", "MAX_POOL_2D")
def _pool(cx: Converter, op: TflOperator) -> None:
    _expect(cx, op, 1)
    x, int8 = _activation_input(cx, op)
    if int8:
        _same_params(cx, op, [x], op.outputs[0])
    xs, ys = cx.info(x).shape, cx.info(op.outputs[0]).shape
    if len(xs) != 4:
        raise Unsupported(f"expects a 4-D input, got {list(xs)}")
    o = op.options
    window, strides = (o.filterHeight, o.filterWidth), (o.strideH, o.strideW)
    attrs = {"window": list(window), "strides": list(strides), "pads": _padding(op, xs[1:3], window, strides, (1, 1), ys[1:3]), **_activation(op)}
    kind = "avg_pool2d" if op.code == "AVERAGE_POOL_2D" else "max_pool2d"
    cx.emit(op, kind, [cx.name(x)], [cx.name(op.outputs[0])], attrs)


@handles("RESHAPE", "SQUEEZE", "EXPAND_DIMS")
def _reshape(cx: Converter, op: TflOperator) -> None:
    """The output tensor's shape is the result (a shape input or option only restates it)."""
    x, _ = _activation_input(cx, op)
    if _is_int8(cx, x):
        _same_params(cx, op, [x], op.outputs[0])
    shape = list(cx.info(op.outputs[0]).shape)
    if int(np.prod(shape)) != int(np.prod(cx.info(x).shape)):
        raise Unsupported(f"output shape {shape} holds another number of elements than input {list(cx.info(x).shape)}")
    cx.emit(op, "reshape", [cx.name(x)], [cx.name(op.outputs[0])], {"shape": shape})


@handles("TRANSPOSE")
def _transpose(cx: Converter, op: TflOperator) -> None:
    _expect(cx, op, 2)
    x, int8 = _activation_input(cx, op)
    if int8:
        _same_params(cx, op, [x], op.outputs[0])
    cx.emit(op, "transpose", [cx.name(x)], [cx.name(op.outputs[0])], {"perm": cx.ints(op.inputs[1], "perm")})


@handles("CONCATENATION")
def _concat(cx: Converter, op: TflOperator) -> None:
    _check_types(cx, op, op.inputs + op.outputs)
    if _activation(op)["act_min"] != -math.inf or _activation(op)["act_max"] != math.inf:
        raise Unsupported("a fused activation on CONCATENATION is not supported")
    if _is_int8(cx, op.outputs[0]):
        _same_params(cx, op, op.inputs, op.outputs[0])
    ins = [cx.name(i) if cx.info(i).data is None or _is_int8(cx, i) else cx.float_constant(i, "operand") for i in op.inputs]
    cx.emit(op, "concat", ins, [cx.name(op.outputs[0])], {"axis": int(op.options.axis)})


@handles("PAD", "PADV2")
def _pad(cx: Converter, op: TflOperator) -> None:
    _expect(cx, op, 2)
    x, int8 = _activation_input(cx, op)
    rank = len(cx.info(x).shape)
    pairs = cx.ints(op.inputs[1], "paddings")
    if len(pairs) != 2 * rank or any(p < 0 for p in pairs):
        raise Unsupported(f"paddings {pairs} are not non-negative (before, after) pairs for rank {rank}")
    pads = pairs[0::2] + pairs[1::2]
    value = 0.0
    if int8:
        _same_params(cx, op, [x], op.outputs[0])
        scale, zp = float(cx.info(x).quant.scale[0]), int(cx.info(x).quant.zero_point[0])
        raw = zp
        if op.code == "PADV2" and len(op.inputs) > 2 and op.inputs[2] >= 0:
            fill = cx.info(op.inputs[2])
            if fill.data is None or fill.type != "INT8" or fill.data.size != 1:
                raise Unsupported("PADV2's value must be a one-element int8 constant")
            raw = int(fill.data.ravel()[0])
        value = float(np.float32(scale) * np.float32(raw - zp))
        if quantize_value(value, scale, zp) != raw:
            raise Unsupported(f"pad value {raw} cannot be expressed on the output's scale")
    elif op.code == "PADV2" and len(op.inputs) > 2 and op.inputs[2] >= 0:
        fill = cx.info(op.inputs[2])
        if fill.data is None or fill.data.size != 1:
            raise Unsupported("PADV2's value must be a one-element constant")
        value = float(fill.data.ravel()[0])
    cx.emit(op, "pad", [cx.name(x)], [cx.name(op.outputs[0])], {"pads": pads, "value": value})


@handles("SOFTMAX")
def _softmax(cx: Converter, op: TflOperator) -> None:
    _expect(cx, op, 1)
    x, _ = _activation_input(cx, op)
    cx.emit(op, "softmax", [cx.name(x)], [cx.name(op.outputs[0])], {"beta": float(op.options.beta)})


def _table(cx: Converter, op: TflOperator, x: int) -> tuple[float, int, float, int]:
    qi, qo = cx.info(x).quant, cx.info(op.outputs[0]).quant  # per tensor, as TFLM reads activations
    return float(qi.scale[0]), int(qi.zero_point[0]), float(qo.scale[0]), int(qo.zero_point[0])


def _elementwise(cx: Converter, op: TflOperator, kind: str, attrs: dict, table: Callable[..., np.ndarray] | None,
                 int8: bool | None = None) -> None:
    """An int8→int8 elementwise op: TFLM's value at each input as the node's `lut` (None: Kiln's own table)."""
    _expect(cx, op, 1)
    if int8 is None:
        x, int8 = _activation_input(cx, op)
    else:
        x = op.inputs[0]
    attrs = dict(attrs)
    if int8 and table is not None:
        try:
            attrs["lut"] = [int(v) for v in table(*_table(cx, op, x))]
        except ValueError as exc:
            raise Unsupported(str(exc)) from None
    cx.emit(op, kind, [cx.name(x)], [cx.name(op.outputs[0])], attrs)


@handles("LOGISTIC")
def _logistic(cx: Converter, op: TflOperator) -> None:
    _elementwise(cx, op, "sigmoid", {}, lambda s, z, _s, _z: tflm.logistic_table(s, z))


@handles("TANH")
def _tanh(cx: Converter, op: TflOperator) -> None:
    _elementwise(cx, op, "tanh", {}, lambda s, z, _s, _z: tflm.tanh_table(s, z))


@handles("HARD_SWISH")
def _hard_swish(cx: Converter, op: TflOperator) -> None:
    _elementwise(cx, op, "hardswish", {}, tflm.hard_swish_table)


@handles("LEAKY_RELU")
def _leaky_relu(cx: Converter, op: TflOperator) -> None:
    alpha = float(np.float32(op.options.alpha))
    _elementwise(cx, op, "leaky_relu", {"alpha": alpha}, lambda *q: tflm.leaky_relu_table(*q, alpha))


@handles("RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1")
def _relu(cx: Converter, op: TflOperator) -> None:
    """RELU and RELU6 as TFLM computes them; RELU_N1_TO_1 and RELU_0_TO_1 (no TFLM kernel) as a clamp."""
    lo, hi = FUSED[op.code]
    table = {"RELU": tflm.relu_table, "RELU6": lambda s, z, _s, _z: tflm.relu6_table(s, z)}.get(op.code)
    _elementwise(cx, op, "clamp", {"act_min": lo, "act_max": hi}, table)


@handles("MAXIMUM", "MINIMUM")
def _max_min(cx: Converter, op: TflOperator) -> None:
    """TFLM compares raw int8 values. With one operand a single-valued constant: a clamp with that table;
    otherwise Kiln's `maximum`/`minimum`, whose int8 form needs the one scale and zero point the converter writes."""
    _expect(cx, op, 2)
    consts = [i for i in op.inputs[:2] if cx.info(i).data is not None]
    if len(consts) == 1 and len(np.unique(cx.info(consts[0]).data)) == 1:
        _clamp_by_constant(cx, op, consts[0])
        return
    _check_types(cx, op, op.inputs[:2] + op.outputs)
    if _is_int8(cx, op.outputs[0]):
        _same_params(cx, op, op.inputs[:2], op.outputs[0])
        ins = [cx.name(i) for i in op.inputs[:2]]
    else:
        ins = [cx.float_constant(i, "operand") if cx.info(i).data is not None else cx.name(i) for i in op.inputs[:2]]
    cx.emit(op, op.code.lower(), ins, [cx.name(op.outputs[0])])


def _clamp_by_constant(cx: Converter, op: TflOperator, c: int) -> None:
    x = next(i for i in op.inputs[:2] if i != c)
    ct = cx.info(c)
    maximum = op.code == "MAXIMUM"
    if _is_int8(cx, x):
        if ct.type != "INT8" or ct.quant is None:
            raise Unsupported(f"constant operand tensor {c} is {ct.type}; an int8 {op.code} compares int8 values")
        raw = int(ct.data.ravel()[0])
        bound = float(ct.quant.scale[0]) * (raw - int(ct.quant.zero_point[0]))
        pick = np.maximum if maximum else np.minimum
        table = lambda *_: pick(tflm.INT8_INPUTS, raw).astype(np.int8)  # noqa: E731
    else:
        bound, table = float(np.asarray(ct.data, np.float32).ravel()[0]), None
    attrs = {"act_min": bound, "act_max": math.inf} if maximum else {"act_min": -math.inf, "act_max": bound}
    _elementwise(cx, _with_inputs(op, [x]), "clamp", attrs, table)


def _with_inputs(op: TflOperator, inputs: list[int]) -> TflOperator:
    return TflOperator(op.index, op.code, inputs, op.outputs, op.options)


@handles("QUANTIZE")
def _quantize(cx: Converter, op: TflOperator) -> None:
    """float → int8 at the model's edge; between int8 and int8 or uint8 (a uint8 model input or output) it
    is TFLM's `Requantize`, a table from byte to byte."""
    _expect(cx, op, 1)
    src, dst = cx.info(op.inputs[0]), cx.info(op.outputs[0])
    bytes_ = ("INT8", "UINT8")
    if src.type == "FLOAT32" and dst.type == "INT8":
        cx.emit(op, "quantize", [cx.name(src.index)], [cx.name(dst.index)], {"to": "int8"})
    elif src.type in bytes_ and dst.type in bytes_ and "INT8" in (src.type, dst.type):
        types = KIR_TYPES[src.type], KIR_TYPES[dst.type]
        attrs = {"act_min": -math.inf, "act_max": math.inf} | ({"to": types[1]} if types[0] != types[1] else {})
        _elementwise(cx, op, "clamp", attrs, lambda *q: tflm.requantize_table(*q, *types), int8=True)
    else:
        raise Unsupported(f"quantizes {src.type} to {dst.type} (Kiln supports float32 to int8, and int8 to and from int8 or uint8)")


@handles("DEQUANTIZE")
def _dequantize(cx: Converter, op: TflOperator) -> None:
    """int8 → float at the model's edge; a constant (float16 or int8 weights) becomes a float constant: the
    output tensor's entry in the model is replaced by that constant, so the operators that use it see one."""
    _expect(cx, op, 1)
    src, dst = cx.info(op.inputs[0]), cx.info(op.outputs[0])
    if dst.type != "FLOAT32":
        raise Unsupported(f"dequantizes to {dst.type}")
    if src.data is not None:
        cx.model.tensors[dst.index] = TflTensor(dst.index, dst.name, dst.shape, "FLOAT32", None,
                                                np.asarray(cx.graph.tensors[cx.float_constant(src.index, "input")].data))
        return
    if src.type != "INT8":
        raise Unsupported(f"dequantizes a {src.type} tensor (Kiln supports int8)")
    cx.emit(op, "dequantize", [cx.name(src.index)], [cx.name(dst.index)])


@handles("MEAN")
def _mean(cx: Converter, op: TflOperator) -> None:
    """int8: TFLM's `QuantizedMeanOrSum` (Kiln's `mean`); float: a global average pool over height and width."""
    _expect(cx, op, 2)
    x, int8 = _activation_input(cx, op)
    xs, ys = cx.info(x).shape, cx.info(op.outputs[0]).shape
    axes = sorted({a % len(xs) for a in cx.ints(op.inputs[1], "axes")}) if xs else []
    if int8:
        try:
            mean_split(xs, axes)
        except OpError as exc:
            raise Unsupported(str(exc)) from None
        cx.emit(op, "mean", [cx.name(x)], [cx.name(op.outputs[0])], {"axes": axes, "keepdims": int(bool(op.options.keepDims))})
        return
    if len(xs) != 4 or axes != [1, 2]:
        raise Unsupported(f"a float MEAN over axes {axes} of shape {list(xs)}: Kiln supports the height and width of a 4-D input")
    pooled = cx.name(op.outputs[0]) if ys == (xs[0], 1, 1, xs[3]) else cx.temp(x, (xs[0], 1, 1, xs[3]), "pooled")
    cx.emit(op, "global_avg_pool", [cx.name(x)], [pooled])
    if pooled != cx.name(op.outputs[0]):
        cx.emit(op, "reshape", [pooled], [cx.name(op.outputs[0])], {"shape": list(ys)}, "shape")


@handles("STRIDED_SLICE")
def _strided_slice(cx: Converter, op: TflOperator) -> None:
    """begin/end/strides with TFLite's masks, resolved to one index range per axis (Python slicing's clamping)."""
    _expect(cx, op, 4)
    x, int8 = _activation_input(cx, op)
    if int8:
        _same_params(cx, op, [x], op.outputs[0])
    o = op.options
    if o.ellipsisMask or o.newAxisMask:
        raise Unsupported("ellipsis_mask and new_axis_mask are not supported")
    xs = cx.info(x).shape
    begin, end, steps = (cx.ints(i, what) for i, what in zip(op.inputs[1:4], ("begin", "end", "strides")))
    if not len(begin) == len(end) == len(steps) <= len(xs) or 0 in steps:
        raise Unsupported(f"begin {begin}, end {end} and strides {steps} do not fit shape {list(xs)}")
    starts, ends, strides, kept = [], [], [], []
    for axis, dim in enumerate(xs):
        if axis >= len(begin):
            starts.append(0), ends.append(dim), strides.append(1), kept.append(dim)
            continue
        b = None if o.beginMask >> axis & 1 else begin[axis]
        e = None if o.endMask >> axis & 1 else (b + end[axis] if o.offset and b is not None else end[axis])
        st = steps[axis]
        if o.shrinkAxisMask >> axis & 1:
            b = begin[axis] + dim if begin[axis] < 0 else begin[axis]
            e, st = b + 1, 1
        s, stop, step = slice(b, e, st).indices(dim)
        starts.append(s), ends.append(stop), strides.append(step)
        if not o.shrinkAxisMask >> axis & 1:
            kept.append(len(range(s, stop, step)))
    full = tuple(len(range(s, e, st)) for s, e, st in zip(starts, ends, strides))
    ys = cx.info(op.outputs[0]).shape
    if tuple(kept) != ys:
        raise Unsupported(f"output shape {list(ys)} differs from the slice's {kept}")
    dst = cx.name(op.outputs[0]) if full == ys else cx.temp(op.outputs[0], full, "slice")
    cx.emit(op, "slice", [cx.name(x)], [dst], {"starts": starts, "ends": ends, "steps": strides})
    if dst != cx.name(op.outputs[0]):
        cx.emit(op, "reshape", [dst], [cx.name(op.outputs[0])], {"shape": list(ys)}, "shrink")


@handles("SPLIT", "SPLIT_V")
def _split(cx: Converter, op: TflOperator) -> None:
    if op.code == "SPLIT":
        axis_index, x = op.inputs[0], op.inputs[1]
    else:
        x, axis_index = op.inputs[0], op.inputs[2]
    _check_types(cx, op, [x] + op.outputs)
    if _is_int8(cx, x):
        for out in op.outputs:
            _same_params(cx, op, [x], out)
    (axis,) = cx.ints(axis_index, "axis")
    xs = cx.info(x).shape
    axis %= len(xs)
    sizes = [cx.info(o).shape[axis] for o in op.outputs]
    if sum(sizes) != xs[axis]:
        raise Unsupported(f"output sizes {sizes} along axis {axis} do not add up to {xs[axis]}")
    cx.emit(op, "split", [cx.name(x)], [cx.name(o) for o in op.outputs], {"axis": axis, "sizes": sizes})


@handles("RESIZE_NEAREST_NEIGHBOR")
def _resize_nearest(cx: Converter, op: TflOperator) -> None:
    """The source row/column of each output one, in float32 as TFLM's `GetNearestNeighbor`."""
    _expect(cx, op, 2)
    x, int8 = _activation_input(cx, op)
    if int8:
        _same_params(cx, op, [x], op.outputs[0])
    xs, ys = cx.info(x).shape, cx.info(op.outputs[0]).shape
    if len(xs) != 4:
        raise Unsupported(f"expects a 4-D input, got {list(xs)}")
    align, half = bool(op.options.alignCorners), bool(op.options.halfPixelCenters)
    index = [_nearest(xs[a], ys[a], align, half) for a in (1, 2)]
    cx.emit(op, "resize_nearest", [cx.name(x)], [cx.name(op.outputs[0])], {"rows": index[0], "cols": index[1]})


def _nearest(in_size: int, out_size: int, align: bool, half: bool) -> list[int]:
    f = np.float32
    scale = f(in_size - 1) / f(out_size - 1) if align and out_size > 1 else f(in_size) / f(out_size)
    pos = (np.arange(out_size, dtype=np.float32) + f(0.5 if half else 0.0)) * scale
    idx = round_half_away(pos) if align else np.floor(pos)
    idx = np.minimum(idx.astype(np.int64), in_size - 1)
    return [int(i) for i in (np.maximum(idx, 0) if half else idx)]
