"""int8 binary ops, softmax, table-driven elementwise ops, quantization boundaries and data movement."""
from __future__ import annotations

import numpy as np

from kiln.ir.graph import Graph, Node
from kiln.ir.kernel_ops import mean_split
from kiln.numerics.fixedpoint import INT8_MAX, INT8_MIN, clamp, quantize_value, requantize, round_half_away, wrap_int32
from kiln.numerics.functions import ELEMENTWISE_OPS
from kiln.numerics.layernorm import layer_norm_params, layer_norm_s8
from kiln.numerics.lut import apply_lut, op_table
from kiln.numerics.params import add_params, mean_multiplier, mul_multiplier, requant_multiplier
from kiln.numerics.softmax import OUTPUT_SCALE, OUTPUT_ZERO_POINT, softmax_params, softmax_s8
from kiln.reference.impls import FLOAT_IMPLS
from kiln.reference.int8_common import act_bounds, int8_impl, io_params, qparams, require_same_params, to_output


def _params(graph: Graph, names: list[str]) -> list[tuple[float, int]]:
    return [qparams(graph.tensors[n]) for n in names]


@int8_impl("add", "sub")
def _add_sub(graph: Graph, node: Node, ins):
    qa, qb, qy = _params(graph, node.inputs + node.outputs)
    p = add_params(qa, qb, qy)
    a = requantize(wrap_int32((ins[0].astype(np.int64) + p.a_offset) << p.left_shift), p.a_mult, p.a_shift)
    b = requantize(wrap_int32((ins[1].astype(np.int64) + p.b_offset) << p.left_shift), p.b_mult, p.b_shift)
    raw = a + b if node.op == "add" else a - b
    return [to_output(raw, p.out_mult, p.out_shift, p.out_zp, *act_bounds(graph, node))]


@int8_impl("mul")
def _mul(graph: Graph, node: Node, ins):
    qa, qb, qy = _params(graph, node.inputs + node.outputs)
    mult, shift = mul_multiplier(qa[0], qb[0], qy[0])
    prod = (ins[0].astype(np.int64) - qa[1]) * (ins[1].astype(np.int64) - qb[1])
    return [to_output(prod, mult, shift, qy[1], *act_bounds(graph, node))]


@int8_impl("maximum", "minimum")
def _max_min(graph: Graph, node: Node, ins):
    """TFLite's MAXIMUM/MINIMUM compare the int8 values; equal parameters make that the real comparison."""
    params = _params(graph, node.inputs + node.outputs)
    if len(set(params)) != 1:
        raise ValueError(f"inputs and output need one scale and zero point, got {params}")
    return [(np.maximum if node.op == "maximum" else np.minimum)(ins[0], ins[1])]


@int8_impl("layer_norm")
def _layer_norm(graph: Graph, node: Node, ins):
    """Integer layer norm over the last axis (kiln.numerics.layernorm)."""
    gamma, beta = (graph.tensors[n].data for n in node.inputs[1:3])
    params = layer_norm_params(gamma, beta, float(node.attrs.get("epsilon", 1e-5)), *io_params(graph, node))
    return [layer_norm_s8(ins[0], params, *act_bounds(graph, node))]


@int8_impl("batch_matmul")
def _batch_matmul(graph: Graph, node: Node, ins):
    """TFLite's int8 BATCH_MATMUL: sum over k of (a - a_zp)(b - b_zp), exact, wrapped to int32, requantized."""
    qa, qb, qy = _params(graph, node.inputs + node.outputs)
    mult, shift = mul_multiplier(qa[0], qb[0], qy[0])
    acc = np.matmul(ins[0].astype(np.int64) - qa[1], ins[1].astype(np.int64) - qb[1])
    return [to_output(wrap_int32(acc), mult, shift, qy[1], *act_bounds(graph, node))]


@int8_impl("softmax")
def _softmax(graph: Graph, node: Node, ins):
    (in_scale, _), out = io_params(graph, node)
    if out != (OUTPUT_SCALE, OUTPUT_ZERO_POINT):
        raise ValueError(f"int8 softmax output must have scale 1/256 and zero point -128, got {out}")
    mult, shift, diff_min = softmax_params(float(node.attrs.get("beta", 1.0)), in_scale)
    return [softmax_s8(ins[0], mult, shift, diff_min)]


@int8_impl(*ELEMENTWISE_OPS)
def _elementwise(graph: Graph, node: Node, ins):
    """Entry i of a table is the output byte for input byte i ^ 0x80 (uint8 inputs and outputs of TFLite files included)."""
    out = apply_lut(np.asarray(ins[0]).view(np.int8), node_table(graph, node))
    return [out.view(np.uint8) if graph.tensors[node.outputs[0]].dtype == "uint8" else out]


def node_table(graph: Graph, node: Node) -> np.ndarray:
    """An int8 elementwise node's table: the one the source fixed (`lut`, e.g. TFLM's), else Kiln's own."""
    if "lut" in node.attrs:
        return np.asarray(node.attrs["lut"], np.int8)
    (in_scale, in_zp), (out_scale, out_zp) = io_params(graph, node)
    return op_table(node.op, node.attrs, in_scale, in_zp, out_scale, out_zp)


@int8_impl("mean")
def _mean(graph: Graph, node: Node, ins):
    """TFLite Micro's `QuantizedMeanOrSum`: the sum less count × input zero point, one folded requantization."""
    (in_scale, in_zp), (out_scale, out_zp) = io_params(graph, node)
    x = ins[0].astype(np.int64)
    outer, count, inner = mean_split(x.shape, node.attrs["axes"])
    mult, shift = mean_multiplier(in_scale, out_scale, count)
    total = wrap_int32(x.reshape(outer, count, inner).sum(axis=1) - in_zp * count)
    out = to_output(total, mult, shift, out_zp)
    return [out.reshape(graph.tensors[node.outputs[0]].shape)]


@int8_impl("quantize")
def _quantize(graph: Graph, node: Node, ins):
    out = graph.tensors[node.outputs[0]]
    if out.dtype != "int8":
        raise ValueError(f"quantize to {out.dtype}: only int8")
    scale, zp = qparams(out)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        r = round_half_away(np.asarray(ins[0], np.float32) / np.float32(scale))
    r = np.clip(np.where(np.isnan(r), -256.0, r), -256.0, 256.0).astype(np.int64)
    return [clamp(r + zp, INT8_MIN, INT8_MAX).astype(np.int8)]


@int8_impl("dequantize")
def _dequantize(graph: Graph, node: Node, ins):
    scale, zp = qparams(graph.tensors[node.inputs[0]])
    return [np.float32(scale) * (ins[0].astype(np.int64) - zp).astype(np.float32)]


def _rescale(x: np.ndarray, src: tuple[float, int], dst: tuple[float, int]) -> np.ndarray:
    """int8 values moved to other quantization parameters (TFLite Requantize); a no-op when they agree."""
    if src == dst:
        return x
    mult, shift = requant_multiplier(src[0], dst[0])
    return to_output(x.astype(np.int64) - src[1], mult, shift, dst[1])


@int8_impl("concat")
def _concat(graph: Graph, node: Node, ins):
    *srcs, dst = _params(graph, node.inputs + node.outputs)
    return [np.concatenate([_rescale(x, s, dst) for x, s in zip(ins, srcs)], axis=node.attrs["axis"])]


@int8_impl("split")
def _split(graph: Graph, node: Node, ins):
    src, *dsts = _params(graph, node.inputs + node.outputs)
    return [_rescale(part, src, dst) for part, dst in zip(FLOAT_IMPLS["split"](node, ins), dsts)]


@int8_impl("pad")
def _pad(graph: Graph, node: Node, ins):
    require_same_params(graph, node)
    scale, zp = qparams(graph.tensors[node.outputs[0]])
    value = min(max(quantize_value(float(node.attrs.get("value", 0.0)), scale, zp), INT8_MIN), INT8_MAX)
    pads = node.attrs["pads"]
    rank = ins[0].ndim
    return [np.pad(ins[0], [(pads[i], pads[i + rank]) for i in range(rank)], constant_values=value)]


@int8_impl("slice")
def _slice(graph: Graph, node: Node, ins):
    """Indices as `range(start, end, step)` per dimension, the op's definition (negative steps included)."""
    require_same_params(graph, node)
    a = node.attrs
    return [ins[0][np.ix_(*[np.arange(s, e, st) for s, e, st in zip(a["starts"], a["ends"], a["steps"])])]]


@int8_impl("reshape", "transpose", "resize_nearest")
def _move(graph: Graph, node: Node, ins):
    require_same_params(graph, node)
    return FLOAT_IMPLS[node.op](node, ins)
