"""Kernel-level operators (snake_case, NHWC, shapes as attributes, fused activations as `act_min`/`act_max`):
what normalization produces and quantization, lowering and code generation consume. See `kiln.ir.ops`."""
from __future__ import annotations

import numpy as np

from kiln.ir.graph import Node, Tensor
from kiln.ir.ops import ANY, FLOAT, OpError, Shape, elementwise, norm_axis, op, pool_out, same_shape


def _conv_like(node: Node, x: Tensor, kh: int, kw: int, out_c: int) -> Shape:
    if len(x.shape) != 4:
        raise OpError(f"expects a 4-D NHWC input, got shape {x.shape}")
    sh, sw = node.attrs.get("strides", [1, 1])
    dh, dw = node.attrs.get("dilations", [1, 1])
    pt, pl, pb, pr = node.attrs.get("pads", [0, 0, 0, 0])
    n, h, w, _ = x.shape
    return (n, pool_out(h, kh, sh, pt, pb, dh), pool_out(w, kw, sw, pl, pr, dw), out_c)


def check_bias(b: Tensor | None, channels: int) -> None:
    if b is not None and b.shape != (channels,):
        raise OpError(f"bias shape {b.shape} does not match {channels} output channels")


@op("conv2d", "kernel", frozenset({"float32", "int8"}))
def _conv2d(node, ins):
    x, w, b = (ins + [None])[:3]
    if len(w.shape) != 4:
        raise OpError(f"expects OHWI weights, got shape {w.shape}")
    oc, kh, kw, ic = w.shape
    if x.shape[3] != ic:
        raise OpError(f"input has {x.shape[3]} channels, weights expect {ic}")
    check_bias(b, oc)
    return [(_conv_like(node, x, kh, kw, oc), x.dtype)]


@op("depthwise_conv2d", "kernel", frozenset({"float32", "int8"}))
def _depthwise(node, ins):
    x, w, b = (ins + [None])[:3]
    if len(w.shape) != 4 or w.shape[0] != 1:
        raise OpError(f"expects 1HWC weights, got shape {w.shape}")
    _, kh, kw, oc = w.shape
    mult = int(node.attrs.get("depth_multiplier", 1))
    if x.shape[3] * mult != oc:
        raise OpError(f"{x.shape[3]} channels x multiplier {mult} != {oc} output channels")
    check_bias(b, oc)
    return [(_conv_like(node, x, kh, kw, oc), x.dtype)]


@op("fully_connected", "kernel", frozenset({"float32", "int8"}))
def _fully_connected(node, ins):
    x, w, b = (ins + [None])[:3]
    if len(x.shape) != 2 or len(w.shape) != 2:
        raise OpError(f"expects 2-D input and [out, in] weights, got {x.shape} and {w.shape}")
    if x.shape[1] != w.shape[1]:
        raise OpError(f"input has {x.shape[1]} features, weights expect {w.shape[1]}")
    check_bias(b, w.shape[0])
    return [((x.shape[0], w.shape[0]), x.dtype)]


@op("layer_norm", "kernel", frozenset({"float32", "int8"}))
def _layer_norm(node, ins):
    x, gamma, beta = ins
    size = x.shape[-1] if x.shape else 0
    for name, t in (("gamma", gamma), ("beta", beta)):
        if t is None or t.shape != (size,) or t.dtype != "float32":
            raise OpError(f"{name} must be float32 of shape ({size},), one value per element of the last axis")
    return [(x.shape, x.dtype)]


@op("batch_matmul", "kernel", frozenset({"float32", "int8"}))
def _batch_matmul(node, ins):
    a, b = ins
    if len(a.shape) < 2 or len(b.shape) != len(a.shape) or a.shape[:-2] != b.shape[:-2]:
        raise OpError(f"expects operands [..., M, K] and [..., K, N] with the same batch dims, got {a.shape} and {b.shape}")
    if a.shape[-1] != b.shape[-2]:
        raise OpError(f"inner dims differ: {a.shape} @ {b.shape}")
    if a.dtype != b.dtype:
        raise OpError(f"input dtypes differ: {a.dtype} and {b.dtype}")
    return [((*a.shape[:-1], b.shape[-1]), a.dtype)]


def _add_sub(node, ins):
    """Two operands, plus the int32 lookup table once lowering picks the table kernel (kiln_add_table_s8)."""
    a, b, *table = ins
    if table and (len(table) > 1 or node.attrs.get("kernel") != "kiln_add_table_s8" or table[0] is None
                  or table[0].dtype != "int32"):
        raise OpError("a third input is only kiln_add_table_s8's int32 table")
    return elementwise(node, [a, b])


for _name in ("add", "sub"):
    op(_name, "kernel", frozenset({"float32", "int8"}))(_add_sub)
for _name in ("mul", "maximum", "minimum"):
    op(_name, "kernel", frozenset({"float32", "int8"}))(elementwise)
op("div", "kernel", FLOAT)(elementwise)


def _pool(node, ins):
    (x,) = ins
    kh, kw = node.attrs["window"]
    return [(_conv_like(node, x, kh, kw, x.shape[3]), x.dtype)]


op("max_pool2d", "kernel", frozenset({"float32", "int8"}))(_pool)
op("avg_pool2d", "kernel", frozenset({"float32", "int8"}))(_pool)


@op("global_avg_pool", "kernel", frozenset({"float32", "int8"}))
def _global_avg_pool(node, ins):
    (x,) = ins
    if len(x.shape) != 4:
        raise OpError(f"expects a 4-D NHWC input, got shape {x.shape}")
    return [((x.shape[0], 1, 1, x.shape[3]), x.dtype)]


def mean_split(shape: Shape, axes: list[int]) -> tuple[int, int, int]:
    """(outer, reduced, inner) element counts of a mean over `axes`: one run of axes, size-1 gaps allowed."""
    axes = sorted({norm_axis(a, len(shape)) for a in axes})
    if not axes:
        raise OpError("mean needs at least one axis")
    first, last = axes[0], axes[-1]
    if any(shape[i] != 1 for i in range(first, last + 1) if i not in axes):
        raise OpError(f"mean over axes {axes} of shape {shape}: the reduced axes must be adjacent")
    prod = lambda dims: int(np.prod(dims, dtype=np.int64))  # noqa: E731
    return prod(shape[:first]), prod(shape[first:last + 1]), prod(shape[last + 1:])


@op("mean", "kernel", frozenset({"int8"}))
def _mean(node, ins):
    """TFLite Micro's int8 MEAN over `axes` (`keepdims` 1 keeps them as size 1)."""
    (x,) = ins
    axes = {norm_axis(a, len(x.shape)) for a in node.attrs["axes"]}
    mean_split(x.shape, sorted(axes))
    keep = bool(node.attrs.get("keepdims", 1))
    return [(tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes), x.dtype)]


@op("reshape", "kernel", ANY)
def _reshape(node, ins):
    (x,) = ins
    shape = tuple(node.attrs["shape"])
    if int(np.prod(shape)) != x.size:
        raise OpError(f"cannot reshape {x.shape} to {shape}")
    return [(shape, x.dtype)]


@op("transpose", "kernel", ANY)
def transpose(node, ins):
    (x,) = ins
    perm = node.attrs["perm"]
    if sorted(perm) != list(range(len(x.shape))):
        raise OpError(f"perm {perm} is not a permutation of rank {len(x.shape)}")
    return [(tuple(x.shape[p] for p in perm), x.dtype)]


@op("concat", "kernel", frozenset({"float32", "int8"}))
def concat(node, ins):
    rank = len(ins[0].shape)
    axis = norm_axis(node.attrs["axis"], rank)
    for t in ins[1:]:
        if len(t.shape) != rank or any(a != b for i, (a, b) in enumerate(zip(t.shape, ins[0].shape)) if i != axis):
            raise OpError(f"shapes {[t.shape for t in ins]} do not concatenate on axis {axis}")
    shape = list(ins[0].shape)
    shape[axis] = sum(t.shape[axis] for t in ins)
    return [(tuple(shape), ins[0].dtype)]


@op("split", "kernel", frozenset({"float32", "int8"}))
def split(node, ins):
    (x,) = ins
    axis = norm_axis(node.attrs["axis"], len(x.shape))
    sizes = node.attrs["sizes"]
    if sum(sizes) != x.shape[axis]:
        raise OpError(f"split sizes {sizes} do not sum to {x.shape[axis]}")
    out = []
    for s in sizes:
        shape = list(x.shape)
        shape[axis] = s
        out.append((tuple(shape), x.dtype))
    return out


@op("slice", "kernel", frozenset({"float32", "int8"}))
def _slice(node, ins):
    (x,) = ins
    starts, ends, steps = node.attrs["starts"], node.attrs["ends"], node.attrs["steps"]
    if not len(starts) == len(ends) == len(steps) == len(x.shape):
        raise OpError("starts, ends and steps need one entry per dimension")
    shape = tuple(len(range(s, e, st)) for s, e, st in zip(starts, ends, steps))
    return [(shape, x.dtype)]


@op("pad", "kernel", frozenset({"float32", "int8"}))
def _pad(node, ins):
    (x,) = ins
    pads = node.attrs["pads"]
    rank = len(x.shape)
    if len(pads) != 2 * rank:
        raise OpError(f"pads needs {2 * rank} entries (begins then ends), got {len(pads)}")
    return [(tuple(d + pads[i] + pads[i + rank] for i, d in enumerate(x.shape)), x.dtype)]


@op("resize_nearest", "kernel", frozenset({"float32", "int8"}))
def _resize_nearest(node, ins):
    (x,) = ins
    rows, cols = node.attrs["rows"], node.attrs["cols"]
    if any(not 0 <= r < x.shape[1] for r in rows) or any(not 0 <= c < x.shape[2] for c in cols):
        raise OpError("source row/column index out of range")
    return [((x.shape[0], len(rows), len(cols), x.shape[3]), x.dtype)]


for _name in ("softmax", "leaky_relu", "sigmoid", "tanh", "hardsigmoid", "hardswish", "silu", "gelu", "lrn_scale"):
    op(_name, "kernel", frozenset({"float32", "int8"}))(same_shape)


@op("clamp", "kernel", frozenset({"float32", "int8", "uint8"}))
def _clamp(node, ins):
    """A clamp with a `lut` may move between int8 and uint8 (`to`): a uint8 model input or output of a TFLite file."""
    return [(ins[0].shape, node.attrs.get("to", ins[0].dtype))]


@op("quantize", "kernel", FLOAT)
def _quantize(node, ins):
    return [(ins[0].shape, node.attrs.get("to", "int8"))]


@op("dequantize", "kernel", frozenset({"int8", "int32"}))
def _dequantize(node, ins):
    return [(ins[0].shape, "float32")]


