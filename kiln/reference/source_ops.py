"""Float implementations of the source-level (ONNX-semantics, NCHW) ops."""
from __future__ import annotations

from math import erf

import numpy as np

from kiln.ir.graph import DTYPES, Tensor, dtype_name
from kiln.ir.source_ops import nearest_indices, resize_plan, split_sizes
from kiln.reference import nn
from kiln.reference.impls import impl


def _f64(x):
    return np.asarray(x, np.float64)


@impl("Conv")
def _conv(node, ins):
    x, w, b = (ins + [None])[:3]
    spatial = x.ndim - 2
    a = node.attrs
    return [nn.conv_nd(x, w, b, a.get("strides", [1] * spatial), a.get("pads", [0] * 2 * spatial), a.get("dilations", [1] * spatial), a.get("group", 1))]


@impl("ConvTranspose")
def _conv_transpose(node, ins):
    x, w, b = (ins + [None])[:3]
    a = node.attrs
    return [nn.conv_transpose2d(x, w, b, a.get("strides", [1, 1]), a.get("pads", [0, 0, 0, 0]), a.get("dilations", [1, 1]),
                                a.get("output_padding", [0, 0]), a.get("group", 1))]


@impl("Gemm")
def _gemm(node, ins):
    a, b, c = (ins + [None])[:3]
    a = _f64(a).T if node.attrs.get("transA", 0) else _f64(a)
    b = _f64(b).T if node.attrs.get("transB", 0) else _f64(b)
    out = node.attrs.get("alpha", 1.0) * (a @ b)
    if c is not None:
        out = out + node.attrs.get("beta", 1.0) * _f64(c)
    return [out]


@impl("MatMul")
def _matmul(node, ins):
    return [np.matmul(_f64(ins[0]), _f64(ins[1]))]


@impl("BatchNormalization")
def _bn(node, ins):
    x, scale, bias, mean, var = (_f64(t) for t in ins[:5])
    shape = (1, -1) + (1,) * (x.ndim - 2)
    inv = scale / np.sqrt(var + node.attrs.get("epsilon", 1e-5))
    return [(x - mean.reshape(shape)) * inv.reshape(shape) + bias.reshape(shape)]


@impl("Relu")
def _relu(node, ins):
    return [np.maximum(_f64(ins[0]), 0.0)]


def _scalar(ins, index: int, default: float) -> float:
    """An optional one-element input (ONNX allows shape [] or [1]) as a float."""
    return default if len(ins) <= index or ins[index] is None else float(np.asarray(ins[index]).ravel()[0])


@impl("Clip")
def _clip(node, ins):
    return [np.clip(_f64(ins[0]), _scalar(ins, 1, -np.inf), _scalar(ins, 2, np.inf))]


@impl("LeakyRelu")
def _leaky(node, ins):
    x = _f64(ins[0])
    return [np.where(x >= 0, x, x * node.attrs.get("alpha", 0.01))]


@impl("Sigmoid")
def _sigmoid(node, ins):
    return [nn.sigmoid(ins[0])]


@impl("Tanh")
def _tanh(node, ins):
    return [np.tanh(_f64(ins[0]))]


@impl("HardSigmoid")
def _hardsigmoid(node, ins):
    return [nn.hardsigmoid(ins[0], node.attrs.get("alpha", 0.2), node.attrs.get("beta", 0.5))]


@impl("HardSwish")
def _hardswish(node, ins):
    x = _f64(ins[0])
    return [x * nn.hardsigmoid(x)]


@impl("Gelu")
def _gelu(node, ins):
    return [nn.gelu(ins[0], node.attrs.get("approximate", "none"))]


@impl("LayerNormalization")
def _layer_norm(node, ins):
    x = _f64(ins[0])
    axis = int(node.attrs.get("axis", -1)) % x.ndim
    beta = ins[2] if len(ins) > 2 else None
    eps = node.attrs.get("epsilon", 1e-5)
    over = tuple(range(axis, x.ndim))
    mean = x.mean(axis=over, keepdims=True)
    inv_std = 1.0 / np.sqrt(((x - mean) ** 2).mean(axis=over, keepdims=True) + eps)
    return [nn.layer_norm(x, ins[1], beta, x.ndim - axis, eps), mean, inv_std][:len(node.outputs)]


@impl("Softmax")
def _softmax(node, ins):
    return [nn.softmax(ins[0], node.attrs.get("axis", -1))]


@impl("Identity", "Dropout")
def _identity(node, ins):
    return [ins[0]] + [np.ones(ins[0].shape, bool)] * (len(node.outputs) - 1)


@impl("Erf")
def _erf(node, ins):
    return [np.vectorize(erf, otypes=[np.float64])(_f64(ins[0]))]


@impl("Sqrt")
def _sqrt(node, ins):
    return [np.sqrt(_f64(ins[0]))]


@impl("Neg")
def _neg(node, ins):
    return [-np.asarray(ins[0])]


@impl("Exp")
def _exp(node, ins):
    return [np.exp(_f64(ins[0]))]


@impl("Reciprocal")
def _reciprocal(node, ins):
    return [1.0 / _f64(ins[0])]


@impl("Pow")
def _pow(node, ins):
    return [np.power(_f64(ins[0]), _f64(ins[1]))]


@impl("Add")
def _add(node, ins):
    return [_f64(ins[0]) + _f64(ins[1])]


@impl("Sub")
def _sub(node, ins):
    return [_f64(ins[0]) - _f64(ins[1])]


@impl("Mul")
def _mul(node, ins):
    return [_f64(ins[0]) * _f64(ins[1])]


@impl("Max")
def _max(node, ins):
    return [np.maximum(ins[0], ins[1])]


@impl("Min")
def _min(node, ins):
    return [np.minimum(ins[0], ins[1])]


@impl("LRN")
def _lrn(node, ins):
    """ONNX's definition: x / (bias + alpha / size * the sum of squares over `size` neighbouring channels)^beta,
    the window reaching floor((size - 1) / 2) channels down and ceil((size - 1) / 2) up."""
    x = _f64(ins[0])
    a = node.attrs
    size = int(a["size"])
    low, high = (size - 1) // 2, size // 2
    squares = np.pad(x * x, [(0, 0), (low, high)] + [(0, 0)] * (x.ndim - 2))
    window = sum(squares[:, i : i + x.shape[1]] for i in range(size))
    return [x / (a.get("bias", 1.0) + a.get("alpha", 1e-4) / size * window) ** a.get("beta", 0.75)]


@impl("Div")
def _div(node, ins):
    if np.issubdtype(ins[0].dtype, np.integer):
        return [np.trunc(_f64(ins[0]) / _f64(ins[1]))]
    return [_f64(ins[0]) / _f64(ins[1])]


def _pool_args(node, x):
    spatial = x.ndim - 2
    a = node.attrs
    k = list(a["kernel_shape"])
    strides = list(a.get("strides", [1] * spatial))
    pads = list(a.get("pads", [0] * 2 * spatial))
    dil = list(a.get("dilations", [1] * spatial))
    if spatial == 1:
        x = x[:, :, None, :]
        k, strides, pads, dil = [1] + k, [1] + strides, [0, pads[0], 0, pads[1]], [1] + dil
    extra = [0, 0]
    if a.get("ceil_mode", 0):
        for i in range(2):
            size = x.shape[2 + i] + pads[i] + pads[i + 2]
            span = dil[i] * (k[i] - 1) + 1
            out = -(-(size - span) // strides[i]) + 1
            if (out - 1) * strides[i] >= x.shape[2 + i] + pads[i]:
                out -= 1
            extra[i] = max(0, (out - 1) * strides[i] + span - size)
    return x, k, strides, pads, dil, extra, spatial


@impl("MaxPool")
def _maxpool(node, ins):
    x, k, strides, pads, dil, extra, spatial = _pool_args(node, _f64(ins[0]))
    out = nn.max_pool_nchw(x, k, strides, pads, dil, extra)
    return [out[:, :, 0, :] if spatial == 1 else out]


@impl("AveragePool")
def _avgpool(node, ins):
    """Average over each window; with count_include_pad the explicit padding counts, never the ceil-mode overhang."""
    x, k, strides, pads, dil, extra, spatial = _pool_args(node, _f64(ins[0]))
    full = [pads[0], pads[1], pads[2] + extra[0], pads[3] + extra[1]]
    total = nn.windows(nn.pad_spatial(x, full), k, strides, dil).sum(axis=(-2, -1))
    ones = np.ones((1, 1) + x.shape[2:])
    if node.attrs.get("count_include_pad", 0):
        ones = nn.pad_spatial(ones, pads, 1.0)
        full = [0, 0, extra[0], extra[1]]
    count = nn.windows(nn.pad_spatial(ones, full), k, strides, dil).sum(axis=(-2, -1))
    out = total / count
    return [out[:, :, 0, :] if spatial == 1 else out]


@impl("GlobalAveragePool")
def _gap(node, ins):
    x = _f64(ins[0])
    return [x.mean(axis=tuple(range(2, x.ndim)), keepdims=True)]


@impl("ReduceMean")
def _reduce_mean(node, ins):
    x = _f64(ins[0])
    axes = node.attrs.get("axes")
    if axes is None:
        axes = [int(a) for a in ins[1]] if len(ins) > 1 and ins[1] is not None else []
    if not axes and node.attrs.get("noop_with_empty_axes", 0):
        return [x]
    return [x.mean(axis=tuple(axes) if axes else None, keepdims=bool(node.attrs.get("keepdims", 1)))]


@impl("Concat")
def _concat(node, ins):
    return [np.concatenate(ins, axis=node.attrs["axis"])]


@impl("Reshape")
def _reshape(node, ins):
    shape = [int(d) for d in ins[1]]
    x = ins[0]
    if not node.attrs.get("allowzero", 0):
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return [x.reshape(shape)]


@impl("Flatten")
def _flatten(node, ins):
    x = ins[0]
    axis = node.attrs.get("axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    return [x.reshape(int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:])))]


@impl("Squeeze")
def _squeeze(node, ins):
    x = ins[0]
    axes = node.attrs.get("axes")
    if axes is None and len(ins) > 1 and ins[1] is not None:
        axes = [int(a) for a in ins[1]]
    return [np.squeeze(x, axis=None if axes is None else tuple(axes))]


@impl("Unsqueeze")
def _unsqueeze(node, ins):
    x = ins[0]
    axes = node.attrs.get("axes")
    if axes is None:
        axes = [int(a) for a in ins[1]]
    rank = x.ndim + len(axes)
    return [np.expand_dims(x, tuple(sorted(a % rank for a in axes)))]


@impl("Transpose")
def _transpose(node, ins):
    return [np.transpose(ins[0], node.attrs.get("perm"))]


@impl("Shape")
def _shape(node, ins):
    rank = ins[0].ndim
    start, end = node.attrs.get("start", 0), node.attrs.get("end", rank)
    return [np.asarray(ins[0].shape[start:end], np.int64)]


@impl("Cast")
def _cast(node, ins):
    return [np.asarray(ins[0]).astype(DTYPES[node.attrs["to"]])]


def _ints(a) -> list[int]:
    return [int(v) for v in np.asarray(a).ravel()]


@impl("Slice")
def _slice(node, ins):
    x = ins[0]
    starts, ends = _ints(ins[1]), _ints(ins[2])
    axes = _ints(ins[3]) if len(ins) > 3 and ins[3] is not None else list(range(len(starts)))
    steps = _ints(ins[4]) if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
    index = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        index[a % x.ndim] = slice(s, e, st)
    return [x[tuple(index)]]


@impl("Split")
def _split(node, ins):
    x = ins[0]
    sizes = split_sizes(node, [_shaped(t) for t in ins])
    axis = node.attrs.get("axis", 0)
    return np.split(x, np.cumsum(sizes)[:-1], axis=axis)


def _shaped(a):
    """Shape inference helpers take tensors: wrap an array as a constant one."""
    return None if a is None else Tensor("", a.shape, dtype_name(a.dtype), data=a)


@impl("Pad")
def _pad(node, ins):
    x = ins[0]
    pads = _ints(ins[1])
    value = _scalar(ins, 2, 0.0)
    axes = [a % x.ndim for a in _ints(ins[3])] if len(ins) > 3 and ins[3] is not None else list(range(x.ndim))
    width = [(0, 0)] * x.ndim
    for i, a in enumerate(axes):
        width[a] = (pads[i], pads[i + len(axes)])
    grown = np.pad(x, [(max(b, 0), max(e, 0)) for b, e in width], constant_values=np.asarray(value).astype(x.dtype))
    crop = tuple(slice(max(-b, 0), grown.shape[i] - max(-e, 0)) for i, (b, e) in enumerate(width))
    return [grown[crop]]


@impl("Resize")
def _resize(node, ins):
    x = ins[0]
    shape, scales = resize_plan(node, [_shaped(t) for t in ins])
    mode = node.attrs.get("coordinate_transformation_mode", "half_pixel")
    nearest = node.attrs.get("nearest_mode", "round_prefer_floor")
    for axis, (size, scale) in enumerate(zip(shape, scales)):
        if size != x.shape[axis] or scale != 1.0:
            x = np.take(x, nearest_indices(x.shape[axis], size, scale, mode, nearest), axis=axis)
    return [x]


@impl("Gather")
def _gather(node, ins):
    return [np.take(ins[0], np.asarray(ins[1], np.int64), axis=node.attrs.get("axis", 0))]


@impl("ConstantOfShape")
def _constant_of_shape(node, ins):
    dtype = DTYPES[node.attrs.get("dtype", "float32")]
    return [np.full(_ints(ins[0]), node.attrs.get("value", 0), dtype=dtype)]


@impl("Range")
def _range(node, ins):
    start, limit, delta = (np.asarray(t).ravel()[0] for t in ins)
    n = max(int(np.ceil((float(limit) - float(start)) / float(delta))), 0)
    return [start + np.arange(n, dtype=np.asarray(ins[0]).dtype) * delta]
