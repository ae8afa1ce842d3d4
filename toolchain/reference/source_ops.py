"""Float implementations of the source-level (ONNX-semantics, NCHW) ops."""
from __future__ import annotations

import numpy as np

from toolchain.ir.graph import DTYPES
from toolchain.reference import nn
from toolchain.reference.executor import impl


def _f64(x):
    return np.asarray(x, np.float64)


@impl("Conv")
def _conv(node, ins):
    x, w, b = (ins + [None])[:3]
    spatial = x.ndim - 2
    a = node.attrs
    return [nn.conv_nd(x, w, b, a.get("strides", [1] * spatial), a.get("pads", [0] * 2 * spatial), a.get("dilations", [1] * spatial), a.get("group", 1))]


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


@impl("Clip")
def _clip(node, ins):
    lo = -np.inf if len(ins) < 2 or ins[1] is None else float(ins[1])
    hi = np.inf if len(ins) < 3 or ins[2] is None else float(ins[2])
    return [np.clip(_f64(ins[0]), lo, hi)]


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


@impl("Softmax")
def _softmax(node, ins):
    return [nn.softmax(ins[0], node.attrs.get("axis", -1))]


@impl("Identity", "Dropout")
def _identity(node, ins):
    return [ins[0]] + [np.ones(ins[0].shape, bool)] * (len(node.outputs) - 1)


@impl("Add")
def _add(node, ins):
    return [_f64(ins[0]) + _f64(ins[1])]


@impl("Sub")
def _sub(node, ins):
    return [_f64(ins[0]) - _f64(ins[1])]


@impl("Mul")
def _mul(node, ins):
    return [_f64(ins[0]) * _f64(ins[1])]


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
    x, k, strides, pads, _, extra, spatial = _pool_args(node, _f64(ins[0]))
    out = nn.avg_pool_nchw(x, k, strides, pads, bool(node.attrs.get("count_include_pad", 0)), extra)
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
        axes = [int(a) for a in ins[1]] if len(ins) > 1 and ins[1] is not None else list(range(x.ndim))
    return [x.mean(axis=tuple(axes), keepdims=bool(node.attrs.get("keepdims", 1)))]


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
    axis = node.attrs.get("axis", 1) % (x.ndim + 1) if x.ndim else 0
    return [x.reshape(int(np.prod(x.shape[:axis])), -1)]


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
