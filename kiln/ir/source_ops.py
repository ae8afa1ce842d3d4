"""Source-level operators: ONNX names and semantics (NCHW, shapes as constant inputs), as the frontends
produce them. See `kiln.ir.ops`."""
from __future__ import annotations

import numpy as np

from kiln.ir.graph import Node, Tensor
from kiln.ir.kernel_ops import check_bias, concat, split, transpose
from kiln.ir.ops import ANY, FLOAT, NUMERIC, OpError, Shape, broadcast, const_ints, elementwise, norm_axis, op, pool_out, same_shape


# Each source op takes the form of its newest ONNX version: values that older
# opsets gave as attributes are constant inputs (Clip bounds, Pad pads/value,
# Slice starts/ends/axes/steps, Split sizes, ReduceMean/Squeeze/Unsqueeze
# axes, Resize scales/sizes). Frontends resolve what ONNX leaves implicit:
# Conv/pool `auto_pad` becomes explicit `pads` (begins then ends), Softmax
# has opset-13 semantics (one axis), Cast `to` and ConstantOfShape `dtype`
# are IR dtype names, Resize is `mode="nearest"` only.
@op("Conv", "source", FLOAT)
def _onnx_conv(node, ins):
    x, w, b = (ins + [None])[:3]
    spatial = len(x.shape) - 2
    if spatial < 1 or len(w.shape) != spatial + 2:
        raise OpError(f"input {x.shape} and weights {w.shape} do not match")
    group = int(node.attrs.get("group", 1))
    if x.shape[1] != w.shape[1] * group:
        raise OpError(f"input has {x.shape[1]} channels, weights expect {w.shape[1]} x group {group}")
    check_bias(b, w.shape[0])
    strides = node.attrs.get("strides", [1] * spatial)
    dil = node.attrs.get("dilations", [1] * spatial)
    pads = node.attrs.get("pads", [0] * 2 * spatial)
    out = [pool_out(x.shape[2 + i], w.shape[2 + i], strides[i], pads[i], pads[i + spatial], dil[i]) for i in range(spatial)]
    return [((x.shape[0], w.shape[0], *out), x.dtype)]


@op("ConvTranspose", "source", FLOAT)
def _onnx_conv_transpose(node, ins):
    """2-D transposed convolution with explicit pads (begins then ends) and output_padding."""
    x, w, b = (ins + [None])[:3]
    if len(x.shape) != 4 or len(w.shape) != 4:
        raise OpError(f"expects a 4-D input and [in, out/group, kh, kw] weights, got {x.shape} and {w.shape}")
    group = int(node.attrs.get("group", 1))
    if x.shape[1] != w.shape[0]:
        raise OpError(f"input has {x.shape[1]} channels, weights expect {w.shape[0]}")
    check_bias(b, w.shape[1] * group)
    a = node.attrs
    strides, dil = a.get("strides", [1, 1]), a.get("dilations", [1, 1])
    pads, extra = a.get("pads", [0, 0, 0, 0]), a.get("output_padding", [0, 0])
    out = [(x.shape[2 + i] - 1) * strides[i] - pads[i] - pads[i + 2] + dil[i] * (w.shape[2 + i] - 1) + extra[i] + 1 for i in range(2)]
    if min(out) < 1:
        raise OpError(f"output size {out} is empty")
    return [((x.shape[0], w.shape[1] * group, *out), x.dtype)]


@op("Gemm", "source", FLOAT)
def _onnx_gemm(node, ins):
    a, b, c = (ins + [None])[:3]
    m, k = a.shape[::-1] if node.attrs.get("transA", 0) else a.shape
    k2, n = b.shape[::-1] if node.attrs.get("transB", 0) else b.shape
    if k != k2:
        raise OpError(f"inner dimensions differ: {a.shape} and {b.shape}")
    if c is not None:
        broadcast(c.shape, (m, n))
    return [((m, n), a.dtype)]


@op("MatMul", "source", FLOAT)
def _onnx_matmul(node, ins):
    a, b = ins
    if len(a.shape) < 1 or len(b.shape) < 1:
        raise OpError("MatMul needs inputs of rank >= 1")
    sa = (1,) + a.shape if len(a.shape) == 1 else a.shape
    sb = b.shape + (1,) if len(b.shape) == 1 else b.shape
    if sa[-1] != sb[-2]:
        raise OpError(f"inner dimensions differ: {a.shape} and {b.shape}")
    shape = broadcast(sa[:-2], sb[:-2]) + (sa[-2], sb[-1])
    if len(a.shape) == 1:
        shape = shape[:-2] + shape[-1:]
    if len(b.shape) == 1:
        shape = shape[:-1]
    return [(shape, a.dtype)]


@op("LayerNormalization", "source", FLOAT)
def _onnx_layer_norm(node, ins):
    """Y, and when the node lists them Mean and InvStdDev (float32, the normalized axes kept as 1)."""
    x = ins[0]
    axis = norm_axis(int(node.attrs.get("axis", -1)), len(x.shape))
    for t in ins[1:3]:
        if t is not None and broadcast(x.shape[axis:], t.shape) != x.shape[axis:]:
            raise OpError(f"parameter shape {t.shape} does not broadcast to the normalized shape {x.shape[axis:]}")
    stats = (x.shape[:axis] + (1,) * (len(x.shape) - axis), "float32")
    return [(x.shape, x.dtype)] + [stats] * (len(node.outputs) - 1)


@op("BatchNormalization", "source", FLOAT)
def _onnx_bn(node, ins):
    x = ins[0]
    for t in ins[1:5]:
        if t.shape != (x.shape[1],):
            raise OpError(f"parameter shape {t.shape} does not match {x.shape[1]} channels")
    return [(x.shape, x.dtype)]


for _name in ("Relu", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Gelu", "Softmax", "Identity", "Erf", "Sqrt", "Neg", "Exp", "Reciprocal"):
    op(_name, "source", NUMERIC)(same_shape)


@op("Dropout", "source", NUMERIC)
def _onnx_dropout(node, ins):
    """Inference-mode Dropout: the output is the input; an optional mask output is all true."""
    x = ins[0]
    return [(x.shape, x.dtype)] + [(x.shape, "bool")] * (len(node.outputs) > 1)


@op("Clip", "source", NUMERIC)
def _onnx_clip(node, ins):
    for bound in ins[1:]:
        if bound is not None and bound.data is None:
            raise OpError("Clip bounds must be constants")
    return [(ins[0].shape, ins[0].dtype)]


for _name in ("Add", "Sub", "Mul", "Div", "Max", "Min"):
    op(_name, "source", NUMERIC)(elementwise)


@op("LRN", "source", FLOAT)
def _onnx_lrn(node, ins):
    if len(ins[0].shape) < 3:
        raise OpError(f"LRN needs an input of rank >= 3 (N, C, ...), got {list(ins[0].shape)}")
    return [(ins[0].shape, ins[0].dtype)]


@op("Pow", "source", NUMERIC)
def _onnx_pow(node, ins):
    """ONNX lets the exponent have its own type; the result has the base's."""
    a, b = ins
    return [(broadcast(a.shape, b.shape), a.dtype)]


def _onnx_pool(node, ins):
    (x,) = ins
    spatial = len(x.shape) - 2
    k = node.attrs["kernel_shape"]
    strides = node.attrs.get("strides", [1] * spatial)
    pads = node.attrs.get("pads", [0] * 2 * spatial)
    dil = node.attrs.get("dilations", [1] * spatial)
    ceil = bool(node.attrs.get("ceil_mode", 0))
    out = [pool_out(x.shape[2 + i], k[i], strides[i], pads[i], pads[i + spatial], dil[i], ceil) for i in range(spatial)]
    return [((x.shape[0], x.shape[1], *out), x.dtype)]


op("MaxPool", "source", FLOAT)(_onnx_pool)
op("AveragePool", "source", FLOAT)(_onnx_pool)


@op("GlobalAveragePool", "source", FLOAT)
def _onnx_gap(node, ins):
    (x,) = ins
    return [(x.shape[:2] + (1,) * (len(x.shape) - 2), x.dtype)]


@op("ReduceMean", "source", FLOAT)
def _onnx_reduce_mean(node, ins):
    x = ins[0]
    axes = node.attrs.get("axes")
    if axes is None:
        axes = const_ints(ins[1], "ReduceMean axes") if len(ins) > 1 and ins[1] is not None else []
    if not axes:
        if node.attrs.get("noop_with_empty_axes", 0):
            return [(x.shape, x.dtype)]
        axes = list(range(len(x.shape)))
    axes = {norm_axis(a, len(x.shape)) for a in axes}
    keep = bool(node.attrs.get("keepdims", 1))
    shape = tuple((1 if i in axes else d) for i, d in enumerate(x.shape) if keep or i not in axes)
    return [(shape, x.dtype)]


@op("Concat", "source", ANY)
def _onnx_concat(node, ins):
    return concat(node, ins)


@op("Reshape", "source", ANY)
def _onnx_reshape(node, ins):
    x, shape_t = ins
    shape = const_ints(shape_t, "Reshape shape")
    out = [x.shape[i] if d == 0 and not node.attrs.get("allowzero", 0) else d for i, d in enumerate(shape)]
    if out.count(-1) > 1:
        raise OpError(f"Reshape shape {shape} has more than one -1")
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1]))
        if known == 0 or x.size % known:
            raise OpError(f"cannot reshape {x.shape} to {shape}")
        out[out.index(-1)] = x.size // known
    if int(np.prod(out)) != x.size:
        raise OpError(f"cannot reshape {x.shape} to {shape}")
    return [(tuple(out), x.dtype)]


@op("Flatten", "source", ANY)
def _onnx_flatten(node, ins):
    (x,) = ins
    axis, rank = node.attrs.get("axis", 1), len(x.shape)
    if not -rank <= axis <= rank:
        raise OpError(f"Flatten axis {axis} out of range for rank {rank}")
    axis = axis + rank if axis < 0 else axis
    return [((int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:]))), x.dtype)]


def _axes_input(node: Node, ins: list[Tensor | None], what: str) -> list[int]:
    if "axes" in node.attrs:
        return list(node.attrs["axes"])
    return const_ints(ins[1], f"{what} axes") if len(ins) > 1 and ins[1] is not None else []


@op("Squeeze", "source", ANY)
def _onnx_squeeze(node, ins):
    x = ins[0]
    axes = {norm_axis(a, len(x.shape)) for a in _axes_input(node, ins, "Squeeze")} or {i for i, d in enumerate(x.shape) if d == 1}
    if any(x.shape[a] != 1 for a in axes):
        raise OpError(f"cannot squeeze axes {sorted(axes)} of shape {x.shape}")
    return [(tuple(d for i, d in enumerate(x.shape) if i not in axes), x.dtype)]


@op("Unsqueeze", "source", ANY)
def _onnx_unsqueeze(node, ins):
    x = ins[0]
    axes = _axes_input(node, ins, "Unsqueeze")
    rank = len(x.shape) + len(axes)
    axes = sorted(norm_axis(a, rank) for a in axes)
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return [(tuple(shape), x.dtype)]


@op("Transpose", "source", ANY)
def _onnx_transpose(node, ins):
    (x,) = ins
    perm = node.attrs.get("perm", list(range(len(x.shape)))[::-1])
    return transpose(node.copy(attrs={"perm": perm}), ins)


@op("Shape", "source", ANY)
def _onnx_shape(node, ins):
    rank = len(ins[0].shape)
    start, end = node.attrs.get("start", 0), node.attrs.get("end", rank)
    return [((len(range(rank)[start:end]),), "int64")]


@op("Cast", "source", ANY)
def _onnx_cast(node, ins):
    return [(ins[0].shape, node.attrs["to"])]


def _optional(ins: list[Tensor | None], index: int) -> Tensor | None:
    return ins[index] if len(ins) > index else None


@op("Slice", "source", ANY)
def _onnx_slice(node, ins):
    x = ins[0]
    rank = len(x.shape)
    starts, ends = const_ints(ins[1], "Slice starts"), const_ints(ins[2], "Slice ends")
    axes_t, steps_t = _optional(ins, 3), _optional(ins, 4)
    axes = [norm_axis(a, rank) for a in const_ints(axes_t, "Slice axes")] if axes_t is not None else list(range(len(starts)))
    steps = const_ints(steps_t, "Slice steps") if steps_t is not None else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps) or len(set(axes)) != len(axes):
        raise OpError("Slice starts, ends, axes and steps need one entry per sliced axis, axes distinct")
    if 0 in steps:
        raise OpError("Slice step 0")
    shape = list(x.shape)
    for s, e, a, st in zip(starts, ends, axes, steps):
        shape[a] = len(range(*slice(s, e, st).indices(x.shape[a])))
    return [(tuple(shape), x.dtype)]


def split_sizes(node: Node, ins: list[Tensor | None]) -> list[int]:
    """The size of each Split output: the `split` input, or `num_outputs` chunks, or equal parts."""
    x = ins[0]
    dim = x.shape[norm_axis(node.attrs.get("axis", 0), len(x.shape))]
    split_t = _optional(ins, 1)
    if split_t is not None:
        sizes = const_ints(split_t, "Split sizes")
    elif "num_outputs" in node.attrs:
        n = int(node.attrs["num_outputs"])
        chunk = -(-dim // n)
        sizes = [min(chunk, max(dim - i * chunk, 0)) for i in range(n)]
    else:
        n = len(node.outputs)
        if dim % n:
            raise OpError(f"dimension {dim} does not split into {n} equal parts")
        sizes = [dim // n] * n
    if sum(sizes) != dim or any(s < 0 for s in sizes):
        raise OpError(f"split sizes {sizes} do not sum to {dim}")
    return sizes


@op("Split", "source", ANY)
def _onnx_split(node, ins):
    return split(node.copy(attrs={"axis": node.attrs.get("axis", 0), "sizes": split_sizes(node, ins)}), ins[:1])


@op("Pad", "source", ANY)
def _onnx_pad(node, ins):
    x = ins[0]
    rank = len(x.shape)
    if node.attrs.get("mode", "constant") != "constant":
        raise OpError(f"Pad mode {node.attrs['mode']!r}: only constant padding")
    pads = const_ints(ins[1], "Pad pads")
    value_t, axes_t = _optional(ins, 2), _optional(ins, 3)
    if value_t is not None and (value_t.data is None or value_t.size != 1):
        raise OpError("Pad value must be a one-element constant")
    axes = [norm_axis(a, rank) for a in const_ints(axes_t, "Pad axes")] if axes_t is not None else list(range(rank))
    if len(pads) != 2 * len(axes):
        raise OpError(f"pads needs {2 * len(axes)} entries (begins then ends), got {len(pads)}")
    shape = list(x.shape)
    for i, a in enumerate(axes):
        shape[a] += pads[i] + pads[i + len(axes)]
    if any(d < 0 for d in shape):
        raise OpError(f"pads {pads} crop more than shape {x.shape}")
    return [(tuple(shape), x.dtype)]


RESIZE_COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def resize_plan(node: Node, ins: list[Tensor | None]) -> tuple[Shape, list[float]]:
    """Output shape and per-axis scale of a Resize, computed as ONNX (opset 19) does.

    The scale is what the coordinate transformation divides by: the given
    scale, or output/input size for `sizes`, or the one aspect-preserving
    scale of `keep_aspect_ratio_policy`.
    """
    x = ins[0]
    rank = len(x.shape)
    scales_t, sizes_t = _optional(ins, 2), _optional(ins, 3)
    axes = [norm_axis(a, rank) for a in node.attrs.get("axes", list(range(rank)))]
    if (scales_t is None) == (sizes_t is None):
        raise OpError("Resize needs exactly one of scales and sizes")
    scales, out = [1.0] * rank, list(x.shape)
    if scales_t is not None:
        if scales_t.data is None:
            raise OpError("Resize scales must be a constant")
        given = [float(v) for v in np.asarray(scales_t.data).ravel()]
        if len(given) != len(axes) or any(not s > 0 for s in given):
            raise OpError(f"Resize needs {len(axes)} positive scales, got {given}")
        for a, s in zip(axes, given):
            scales[a], out[a] = s, int(x.shape[a] * s)
        return tuple(out), scales
    sizes = const_ints(sizes_t, "Resize sizes")
    if len(sizes) != len(axes) or any(s <= 0 for s in sizes):
        raise OpError(f"Resize needs {len(axes)} positive sizes, got {sizes}")
    for a, s in zip(axes, sizes):
        scales[a], out[a] = s / x.shape[a], s
    policy = node.attrs.get("keep_aspect_ratio_policy", "stretch")
    if policy != "stretch":
        scale = (min if policy == "not_larger" else max)(scales[a] for a in axes)
        for a in axes:
            scales[a], out[a] = scale, int(scale * x.shape[a] + 0.5)
    return tuple(out), scales


def nearest_indices(in_size: int, out_size: int, scale: float, mode: str, nearest_mode: str) -> list[int]:
    """The source index of each output position of a nearest Resize along one axis (ONNX rules)."""
    y = np.arange(out_size, dtype=np.float64)
    if mode == "align_corners":
        x = np.zeros(out_size) if out_size == 1 else y * (in_size - 1) / (out_size - 1)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_half_pixel_for_nn":
        x = (y + 0.5) / scale
    elif mode == "pytorch_half_pixel":
        x = np.zeros(out_size) if out_size == 1 else (y + 0.5) / scale - 0.5
    elif mode == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        offset = in_size / 2 * (1 - out_size / (scale * in_size))
        x = offset + (y + 0.5) / scale - 0.5
    else:
        raise OpError(f"Resize coordinate_transformation_mode {mode!r} not supported")
    rounding = {"round_prefer_floor": lambda v: np.ceil(v - 0.5), "round_prefer_ceil": lambda v: np.floor(v + 0.5), "floor": np.floor, "ceil": np.ceil}
    if nearest_mode not in rounding:
        raise OpError(f"Resize nearest_mode {nearest_mode!r} not supported")
    return [int(i) for i in np.clip(rounding[nearest_mode](x), 0, in_size - 1)]


@op("Resize", "source", ANY)
def _onnx_resize(node, ins):
    if node.attrs.get("mode", "nearest") != "nearest":
        raise OpError(f"Resize mode {node.attrs['mode']!r}: only nearest")
    if node.attrs.get("coordinate_transformation_mode", "half_pixel") not in RESIZE_COORDINATE_MODES:
        raise OpError(f"Resize coordinate_transformation_mode {node.attrs['coordinate_transformation_mode']!r} not supported")
    if node.attrs.get("nearest_mode", "round_prefer_floor") not in NEAREST_MODES:
        raise OpError(f"Resize nearest_mode {node.attrs['nearest_mode']!r} not supported")
    shape, _ = resize_plan(node, ins)
    return [(shape, ins[0].dtype)]


@op("Gather", "source", ANY)
def _onnx_gather(node, ins):
    data, indices = ins
    if indices.dtype not in ("int32", "int64"):
        raise OpError(f"Gather indices must be int32 or int64, got {indices.dtype}")
    axis = norm_axis(node.attrs.get("axis", 0), len(data.shape))
    return [(data.shape[:axis] + indices.shape + data.shape[axis + 1 :], data.dtype)]


@op("ConstantOfShape", "source", frozenset({"int64"}))
def _onnx_constant_of_shape(node, ins):
    shape = const_ints(ins[0], "ConstantOfShape shape")
    if any(d < 0 for d in shape):
        raise OpError(f"negative dimension in {shape}")
    return [(tuple(shape), node.attrs.get("dtype", "float32"))]


@op("Range", "source", NUMERIC)
def _onnx_range(node, ins):
    for t in ins:
        if t is None or t.data is None or t.size != 1:
            raise OpError("Range start, limit and delta must be one-element constants")
    start, limit, delta = (float(np.asarray(t.data).ravel()[0]) for t in ins)
    if delta == 0:
        raise OpError("Range delta 0")
    return [((max(int(np.ceil((limit - start) / delta)), 0),), ins[0].dtype)]
