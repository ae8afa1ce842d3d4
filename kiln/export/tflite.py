"""Write a Kiln int8 graph (a quantized, lowered or planned stage) as a TFLite flatbuffer with the
same tensors (each under its Kiln name) and parameters: to open it in Netron, or to run it on the
TFLite Micro interpreter as an independent witness of the int8 arithmetic (`kiln export`).

Only what has an exact TFLite form is written; anything else (float ops of float islands,
hardsigmoid, silu, gelu, split, slice, resize_nearest) raises `NotExportable` with the reason.
Exactness rules:

- Explicit paddings: a conv or pool whose output size and top/left padding equal what TFLite's
  SAME or VALID computes is written with that padding (bottom/right padding beyond what the
  output reads changes nothing: both sides skip out-of-image taps). Otherwise a conv gets an
  explicit PADV2 with the input zero point (whose taps add w·0) and VALID; a max pool a PADV2
  with −128 (never above a window's image values); an average pool has no exact form (an
  explicit pad would be counted in the divisor) and is refused.
- Fused activations: ±inf, [0, inf), [0, 6] and [−1, 1] are NONE, RELU, RELU6 and
  RELU_N1_TO_1. Any other range is written as NONE followed by MAXIMUM/MINIMUM with int8
  constants from TFLite's `CalculateActivationRangeQuantized` (`activation_range`): clamping
  the saturated int8 result to bounds inside int8 equals clamping the unsaturated one.
- `clamp` is MAXIMUM/MINIMUM (after an int8→int8 QUANTIZE when its output parameters differ);
  a `concat` input with other parameters than the output is requantized by such a QUANTIZE;
  `pad` is PAD when its value quantizes to the zero point, else PADV2; `global_avg_pool` is
  MEAN over H and W (keep_dims), `mean` MEAN over its axes.
- Tables: sigmoid, tanh, hardswish and leaky_relu are LOGISTIC, TANH, HARD_SWISH and LEAKY_RELU.
  A node whose `lut` came from a TFLite file holds exactly what TFLM computes for that builtin;
  Kiln's own tables round the real function once and can differ from TFLM's fixed point by one
  step (docs/ir.md). A `clamp` with a `lut` is written as the TFLite builtin whose TFLM table it
  equals (QUANTIZE, RELU, RELU6), or as MAXIMUM/MINIMUM when it equals that; else it is refused.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from tflite_micro.tensorflow.lite.micro.compression import model_editor as me
from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as tfl

from kiln.ir.graph import Graph, Node
from kiln.numerics import tflm
from kiln.numerics.fixedpoint import activation_range, round_half_away

Op = tfl.BuiltinOperator
Act = tfl.ActivationFunctionType
TENSOR_TYPES = {"int8": tfl.TensorType.INT8, "int32": tfl.TensorType.INT32, "float32": tfl.TensorType.FLOAT32, "uint8": tfl.TensorType.UINT8}
FUSED = {(-math.inf, math.inf): Act.NONE, (0.0, math.inf): Act.RELU, (0.0, 6.0): Act.RELU6, (-1.0, 1.0): Act.RELU_N1_TO_1}
ELEMENTWISE = {"sigmoid": Op.LOGISTIC, "tanh": Op.TANH, "hardswish": Op.HARD_SWISH}


class NotExportable(Exception):
    """The graph uses an op or parameter with no exact TFLite equivalent."""


@dataclass(frozen=True)
class Exported:
    """A .tflite flatbuffer and the index of each Kiln tensor in its subgraph."""

    model: bytes
    tensors: dict[str, int]


def to_tflite(graph: Graph) -> Exported:
    """The graph as a .tflite flatbuffer (raises `NotExportable`)."""
    ex = _Exporter(graph)
    for node in graph.nodes:
        if "kernel" in node.attrs:
            raise NotExportable(f"{node.op} {node.name!r} is lowered (parameters folded); export quantized.kir, the int8 graph before lowering")
        handler = _HANDLERS.get(node.op)
        if handler is None:
            raise NotExportable(f"{node.op} {node.name!r}: no TFLite counterpart in this exporter")
        if node.op not in ("quantize", "dequantize") and graph.tensors[node.inputs[0]].dtype not in ("int8", "uint8"):
            raise NotExportable(f"{node.op} {node.name!r}: float op (float islands are not compared)")
        handler(ex, node)
    sg = me.Subgraph(operators=ex.ops, inputs=[ex.tensor(n) for n in graph.inputs], outputs=[ex.tensor(n) for n in graph.outputs])
    model = bytes(me.Model(subgraphs=[sg]).build())
    return Exported(model, {name: t.index for name, t in ex.tensors.items()})


class _Exporter:
    """The TFLite tensors and operators written so far for one graph."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.tensors: dict[str, me.Tensor] = {}
        self.ops: list[me.Operator] = []
        self.fresh = 0

    def tensor(self, name: str) -> me.Tensor | None:
        """The TFLite tensor of Kiln tensor `name` ("" is an absent input)."""
        if not name:
            return None
        if name not in self.tensors:
            t = self.graph.tensors[name]
            if t.dtype not in TENSOR_TYPES:
                raise NotExportable(f"tensor {name!r} has dtype {t.dtype}")
            quant = None if t.quant is None else me.Quantization(list(t.quant.scale), list(t.quant.zero_point), t.quant.axis)
            data = None if t.data is None else np.ascontiguousarray(t.data)
            self.tensors[name] = me.Tensor(shape=t.shape, dtype=TENSOR_TYPES[t.dtype], data=data, quantization=quant, name=name)
        return self.tensors[name]

    def temp(self, like: str, shape: tuple[int, ...] | None = None) -> me.Tensor:
        """An added int8 intermediate with the parameters of Kiln tensor `like` (and its shape by default)."""
        src = self.graph.tensors[like]
        self.fresh += 1
        quant = me.Quantization(list(src.quant.scale), list(src.quant.zero_point))
        return me.Tensor(shape=src.shape if shape is None else shape, dtype=tfl.TensorType.INT8, quantization=quant, name=f"export_{self.fresh}")

    def const(self, data: np.ndarray, quant_of: str | None = None) -> me.Tensor:
        """An added constant; int8 ones take the parameters of Kiln tensor `quant_of`."""
        self.fresh += 1
        dtype = "int8" if data.dtype == np.int8 else "int32"
        quant = None
        if quant_of is not None:
            src = self.graph.tensors[quant_of].quant
            quant = me.Quantization(list(src.scale), list(src.zero_point))
        return me.Tensor(shape=data.shape, dtype=TENSOR_TYPES[dtype], data=data, quantization=quant, name=f"export_{self.fresh}")

    def emit(self, code: int, inputs: list, outputs: list, options: str | None = None, **fields) -> None:
        op = me.Operator(opcode=code, inputs=inputs, outputs=outputs)
        if options is not None:
            opt = getattr(tfl, f"{options}T")()
            for key, value in fields.items():
                setattr(opt, key, value)
            op._fb.builtinOptionsType = getattr(tfl.BuiltinOptions, options)
            op._fb.builtinOptions = opt
        self.ops.append(op)

    def clamp_to(self, pre: me.Tensor, lo: int, hi: int, out: str) -> None:
        """MAXIMUM with lo then MINIMUM with hi (int8 constants) of `pre`, written to Kiln tensor `out`."""
        steps = [(code, bound) for code, bound, idle in ((Op.MAXIMUM, lo, -128), (Op.MINIMUM, hi, 127)) if bound != idle]
        steps = steps or [(Op.MAXIMUM, -128)]
        for i, (code, bound) in enumerate(steps):
            dst = self.tensor(out) if i == len(steps) - 1 else self.temp(out)
            self.emit(code, [pre, self.const(np.full((1,), bound, np.int8), out)], [dst])
            pre = dst

    def with_activation(self, node: Node, code: int, inputs: list, options: str, **fields) -> None:
        """Emit `node` with its fused activation, split into MAXIMUM/MINIMUM when TFLite has no fused form."""
        out = node.outputs[0]
        bounds = (float(node.attrs.get("act_min", -math.inf)), float(node.attrs.get("act_max", math.inf)))
        if bounds in FUSED:
            self.emit(code, inputs, [self.tensor(out)], options, fusedActivationFunction=FUSED[bounds], **fields)
            return
        pre = self.temp(out)
        self.emit(code, inputs, [pre], options, fusedActivationFunction=Act.NONE, **fields)
        q = self.graph.tensors[out].quant
        self.clamp_to(pre, *activation_range(*bounds, q.scale[0], q.zero_point[0]), out)

    def padding(self, node: Node, kernel: tuple[int, int], fill: int | None) -> tuple[me.Tensor, int]:
        """(input, TFLite padding) equal to Kiln's explicit pads, padding with `fill` first when needed."""
        pt, pl, pb, pr = node.attrs.get("pads", [0, 0, 0, 0])
        strides, dil = node.attrs.get("strides", [1, 1]), node.attrs.get("dilations", [1, 1])
        x = self.tensor(node.inputs[0])
        n, h, w, c = self.graph.tensors[node.inputs[0]].shape
        out_hw = self.graph.tensors[node.outputs[0]].shape[1:3]
        spans = [(k - 1) * d + 1 for k, d in zip(kernel, dil)]
        for mode in (tfl.Padding.VALID, tfl.Padding.SAME):
            if all(_tflite_pad(*a, mode) == (o, lead) for a, o, lead in zip(zip((h, w), spans, strides), out_hw, (pt, pl))):
                return x, mode
        if fill is None:
            raise NotExportable(f"{node.op} {node.name!r}: pads {[pt, pl, pb, pr]} are neither SAME nor VALID")
        padded = self.temp(node.inputs[0], shape=(n, h + pt + pb, w + pl + pr, c))
        paddings = self.const(np.array([[0, 0], [pt, pb], [pl, pr], [0, 0]], np.int32))
        self.emit(Op.PADV2, [x, paddings, self.const(np.full((1,), fill, np.int8), node.inputs[0])], [padded])
        return padded, tfl.Padding.VALID


def _tflite_pad(size: int, span: int, stride: int, mode: int) -> tuple[int, int]:
    """(output size, leading pad) of TFLite's SAME / VALID along one axis."""
    if mode == tfl.Padding.VALID:
        return -(-(size - span + 1) // stride), 0
    out = -(-size // stride)
    return out, max((out - 1) * stride + span - size, 0) // 2


def _zero_point(graph: Graph, name: str) -> int:
    return graph.tensors[name].quant.zero_point[0]


def _conv(ex: _Exporter, node: Node) -> None:
    w = ex.graph.tensors[node.inputs[1]]
    x, padding = ex.padding(node, w.shape[1:3], _zero_point(ex.graph, node.inputs[0]))
    sh, sw = node.attrs.get("strides", [1, 1])
    dh, dw = node.attrs.get("dilations", [1, 1])
    fields = dict(padding=padding, strideH=sh, strideW=sw, dilationHFactor=dh, dilationWFactor=dw)
    inputs = [x] + [ex.tensor(n) for n in node.inputs[1:]]
    if node.op == "conv2d":
        ex.with_activation(node, Op.CONV_2D, inputs, "Conv2DOptions", **fields)
    else:
        mult = int(node.attrs.get("depth_multiplier", 1))
        ex.with_activation(node, Op.DEPTHWISE_CONV_2D, inputs, "DepthwiseConv2DOptions", depthMultiplier=mult, **fields)


def _fully_connected(ex: _Exporter, node: Node) -> None:
    ex.with_activation(node, Op.FULLY_CONNECTED, [ex.tensor(n) for n in node.inputs], "FullyConnectedOptions")


def _batch_matmul(ex: _Exporter, node: Node) -> None:
    """BATCH_MATMUL has no fused activation: a bounded one follows as MAXIMUM/MINIMUM."""
    out = node.outputs[0]
    inputs = [ex.tensor(n) for n in node.inputs]
    bounds = (float(node.attrs.get("act_min", -math.inf)), float(node.attrs.get("act_max", math.inf)))
    if bounds == (-math.inf, math.inf):
        ex.emit(Op.BATCH_MATMUL, inputs, [ex.tensor(out)], "BatchMatMulOptions", adjX=False, adjY=False)
        return
    pre = ex.temp(out)
    ex.emit(Op.BATCH_MATMUL, inputs, [pre], "BatchMatMulOptions", adjX=False, adjY=False)
    q = ex.graph.tensors[out].quant
    ex.clamp_to(pre, *activation_range(*bounds, q.scale[0], q.zero_point[0]), out)


def _binary(ex: _Exporter, node: Node) -> None:
    code, options = {"add": (Op.ADD, "AddOptions"), "sub": (Op.SUB, "SubOptions"), "mul": (Op.MUL, "MulOptions")}[node.op]
    ex.with_activation(node, code, [ex.tensor(n) for n in node.inputs], options)


def _max_min(ex: _Exporter, node: Node) -> None:
    code = Op.MAXIMUM if node.op == "maximum" else Op.MINIMUM
    ex.emit(code, [ex.tensor(n) for n in node.inputs], [ex.tensor(node.outputs[0])])


def _pool(ex: _Exporter, node: Node) -> None:
    kh, kw = node.attrs["window"]
    x, padding = ex.padding(node, (kh, kw), -128 if node.op == "max_pool2d" else None)
    sh, sw = node.attrs.get("strides", [1, 1])
    code = Op.MAX_POOL_2D if node.op == "max_pool2d" else Op.AVERAGE_POOL_2D
    ex.with_activation(node, code, [x], "Pool2DOptions", padding=padding, strideH=sh, strideW=sw, filterHeight=kh, filterWidth=kw)


def _global_avg_pool(ex: _Exporter, node: Node) -> None:
    x, y = ex.tensor(node.inputs[0]), ex.tensor(node.outputs[0])
    ex.emit(Op.MEAN, [x, ex.const(np.array([1, 2], np.int32))], [y], "ReducerOptions", keepDims=True)


def _reshape(ex: _Exporter, node: Node) -> None:
    shape = list(ex.graph.tensors[node.outputs[0]].shape)
    ex.emit(Op.RESHAPE, [ex.tensor(node.inputs[0]), ex.const(np.array(shape, np.int32))], [ex.tensor(node.outputs[0])], "ReshapeOptions", newShape=shape)


def _transpose(ex: _Exporter, node: Node) -> None:
    perm = ex.const(np.array(node.attrs["perm"], np.int32))
    ex.emit(Op.TRANSPOSE, [ex.tensor(node.inputs[0]), perm], [ex.tensor(node.outputs[0])])


def _concat(ex: _Exporter, node: Node) -> None:
    """TFLM's CONCATENATION copies bytes: an input with other parameters is requantized first (QUANTIZE)."""
    out = node.outputs[0]
    ins = []
    for name in node.inputs:
        ins.append(ex.tensor(name))
        if ex.graph.tensors[name].quant != ex.graph.tensors[out].quant:
            moved = ex.temp(out, shape=ex.graph.tensors[name].shape)
            ex.emit(Op.QUANTIZE, [ins.pop()], [moved])
            ins.append(moved)
    ex.emit(Op.CONCATENATION, ins, [ex.tensor(node.outputs[0])], "ConcatenationOptions", axis=int(node.attrs["axis"]), fusedActivationFunction=Act.NONE)


def _pad(ex: _Exporter, node: Node) -> None:
    pads = node.attrs["pads"]
    rank = len(pads) // 2
    paddings = ex.const(np.array([[pads[i], pads[i + rank]] for i in range(rank)], np.int32))
    x, y = ex.tensor(node.inputs[0]), ex.tensor(node.outputs[0])
    q = ex.graph.tensors[node.outputs[0]].quant
    fill = min(max(q.zero_point[0] + int(round_half_away(np.float32(node.attrs.get("value", 0.0)) / np.float32(q.scale[0]))), -128), 127)
    if fill == q.zero_point[0]:  # TFLite's int8 of the value: float32 division, ties away, saturated
        ex.emit(Op.PAD, [x, paddings], [y])
    else:
        ex.emit(Op.PADV2, [x, paddings, ex.const(np.full((1,), fill, np.int8), node.outputs[0])], [y])


def _softmax(ex: _Exporter, node: Node) -> None:
    beta = float(node.attrs.get("beta", 1.0))
    ex.emit(Op.SOFTMAX, [ex.tensor(node.inputs[0])], [ex.tensor(node.outputs[0])], "SoftmaxOptions", beta=beta)


def _elementwise(ex: _Exporter, node: Node) -> None:
    ex.emit(ELEMENTWISE[node.op], [ex.tensor(node.inputs[0])], [ex.tensor(node.outputs[0])])


def _leaky_relu(ex: _Exporter, node: Node) -> None:
    alpha = float(node.attrs["alpha"])
    ex.emit(Op.LEAKY_RELU, [ex.tensor(node.inputs[0])], [ex.tensor(node.outputs[0])], "LeakyReluOptions", alpha=alpha)


def _mean(ex: _Exporter, node: Node) -> None:
    axes = ex.const(np.array(node.attrs["axes"], np.int32))
    ex.emit(Op.MEAN, [ex.tensor(node.inputs[0]), axes], [ex.tensor(node.outputs[0])], "ReducerOptions", keepDims=bool(node.attrs.get("keepdims", 1)))


def _table_builtin(ex: _Exporter, node: Node) -> bool:
    """A clamp whose `lut` is TFLM's QUANTIZE, RELU or RELU6 table for its parameters: written as that builtin."""
    (in_s, in_zp), (out_s, out_zp) = (_qp(ex.graph, node.inputs[0]), _qp(ex.graph, node.outputs[0]))
    lut = np.asarray(node.attrs["lut"], np.int8)
    types = ex.graph.tensors[node.inputs[0]].dtype, ex.graph.tensors[node.outputs[0]].dtype
    candidates = [(Op.QUANTIZE, tflm.requantize_table(in_s, in_zp, out_s, out_zp, *types))]
    if types == ("int8", "int8"):
        candidates += [(Op.RELU, tflm.relu_table(in_s, in_zp, out_s, out_zp)), (Op.RELU6, tflm.relu6_table(in_s, in_zp))]
    for code, table in candidates:
        if np.array_equal(table, lut):
            ex.emit(code, [ex.tensor(node.inputs[0])], [ex.tensor(node.outputs[0])])
            return True
    return False


def _qp(graph: Graph, name: str) -> tuple[float, int]:
    q = graph.tensors[name].quant
    return q.scale[0], q.zero_point[0]


def _clamp(ex: _Exporter, node: Node) -> None:
    if "lut" in node.attrs and _table_builtin(ex, node):
        return
    src, out = node.inputs[0], node.outputs[0]
    if "uint8" in (ex.graph.tensors[src].dtype, ex.graph.tensors[out].dtype):
        raise NotExportable(f"clamp {node.name!r}: a uint8 table that is no TFLite QUANTIZE")
    x = ex.tensor(src)
    q_in, q_out = ex.graph.tensors[src].quant, ex.graph.tensors[out].quant
    if q_in != q_out:
        moved = ex.temp(out)
        ex.emit(Op.QUANTIZE, [x], [moved])
        x = moved
    bounds = (float(node.attrs.get("act_min", -math.inf)), float(node.attrs.get("act_max", math.inf)))
    lo, hi = activation_range(*bounds, q_out.scale[0], q_out.zero_point[0])
    if "lut" in node.attrs:
        steps = tflm.requantize_table(q_in.scale[0], q_in.zero_point[0], q_out.scale[0], q_out.zero_point[0])
        if not np.array_equal(np.minimum(np.maximum(steps, lo), hi), np.asarray(node.attrs["lut"], np.int8)):
            raise NotExportable(f"clamp {node.name!r}: its table has no exact TFLite form")
    ex.clamp_to(x, lo, hi, out)


def _boundary(ex: _Exporter, node: Node) -> None:
    code = Op.QUANTIZE if node.op == "quantize" else Op.DEQUANTIZE
    ex.emit(code, [ex.tensor(node.inputs[0])], [ex.tensor(node.outputs[0])])


_HANDLERS: dict[str, Callable[[_Exporter, Node], None]] = {
    "conv2d": _conv,
    "depthwise_conv2d": _conv,
    "fully_connected": _fully_connected,
    "batch_matmul": _batch_matmul,
    "add": _binary,
    "sub": _binary,
    "mul": _binary,
    "maximum": _max_min,
    "minimum": _max_min,
    "max_pool2d": _pool,
    "avg_pool2d": _pool,
    "global_avg_pool": _global_avg_pool,
    "reshape": _reshape,
    "transpose": _transpose,
    "concat": _concat,
    "pad": _pad,
    "softmax": _softmax,
    "sigmoid": _elementwise,
    "tanh": _elementwise,
    "hardswish": _elementwise,
    "leaky_relu": _leaky_relu,
    "clamp": _clamp,
    "quantize": _boundary,
    "dequantize": _boundary,
    "mean": _mean,
}
