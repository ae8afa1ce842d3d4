"""Float implementations of the kernel-level (NHWC) ops."""
from __future__ import annotations

import numpy as np

from kiln.reference import nn
from kiln.reference.impls import impl


def _f64(x):
    return np.asarray(x, np.float64)


def _act(node, y):
    lo = node.attrs.get("act_min", -np.inf)
    hi = node.attrs.get("act_max", np.inf)
    return np.clip(y, lo, hi) if (lo > -np.inf or hi < np.inf) else y


def _nchw(x):
    return np.transpose(x, (0, 3, 1, 2))


def _nhwc(x):
    return np.transpose(x, (0, 2, 3, 1))


def _conv_attrs(node):
    a = node.attrs
    pt, pl, pb, pr = a.get("pads", [0, 0, 0, 0])
    return a.get("strides", [1, 1]), [pt, pl, pb, pr], a.get("dilations", [1, 1])


@impl("conv2d")
def _conv2d(node, ins):
    x, w, b = (ins + [None])[:3]
    strides, pads, dil = _conv_attrs(node)
    out = nn.conv2d_nchw(_nchw(x), np.transpose(w, (0, 3, 1, 2)), b, strides, pads, dil, 1)
    return [_act(node, _nhwc(out))]


@impl("depthwise_conv2d")
def _depthwise(node, ins):
    x, w, b = (ins + [None])[:3]
    strides, pads, dil = _conv_attrs(node)
    out = nn.conv2d_nchw(_nchw(x), np.transpose(w, (3, 0, 1, 2)), b, strides, pads, dil, x.shape[3])
    return [_act(node, _nhwc(out))]


@impl("fully_connected")
def _fully_connected(node, ins):
    x, w, b = (ins + [None])[:3]
    y = _f64(x) @ _f64(w).T
    return [_act(node, y if b is None else y + _f64(b))]


@impl("layer_norm")
def _layer_norm(node, ins):
    return [nn.layer_norm(ins[0], ins[1], ins[2], 1, node.attrs.get("epsilon", 1e-5))]


@impl("batch_matmul")
def _batch_matmul(node, ins):
    return [_act(node, np.matmul(_f64(ins[0]), _f64(ins[1])))]


@impl("add")
def _add(node, ins):
    return [_act(node, _f64(ins[0]) + _f64(ins[1]))]


@impl("sub")
def _sub(node, ins):
    return [_act(node, _f64(ins[0]) - _f64(ins[1]))]


@impl("mul")
def _mul(node, ins):
    return [_act(node, _f64(ins[0]) * _f64(ins[1]))]


@impl("maximum")
def _maximum(node, ins):
    return [np.maximum(ins[0], ins[1])]


@impl("minimum")
def _minimum(node, ins):
    return [np.minimum(ins[0], ins[1])]


@impl("div")
def _div(node, ins):
    return [_act(node, _f64(ins[0]) / _f64(ins[1]))]


@impl("max_pool2d")
def _max_pool(node, ins):
    strides, pads, _ = _conv_attrs(node)
    return [_act(node, _nhwc(nn.max_pool_nchw(_nchw(_f64(ins[0])), node.attrs["window"], strides, pads)))]


@impl("avg_pool2d")
def _avg_pool(node, ins):
    strides, pads, _ = _conv_attrs(node)
    return [_act(node, _nhwc(nn.avg_pool_nchw(_nchw(_f64(ins[0])), node.attrs["window"], strides, pads, False)))]


@impl("global_avg_pool")
def _global_avg_pool(node, ins):
    return [_f64(ins[0]).mean(axis=(1, 2), keepdims=True)]


@impl("reshape")
def _reshape(node, ins):
    return [np.reshape(ins[0], node.attrs["shape"])]


@impl("transpose")
def _transpose(node, ins):
    return [np.transpose(ins[0], node.attrs["perm"])]


@impl("concat")
def _concat(node, ins):
    return [np.concatenate(ins, axis=node.attrs["axis"])]


@impl("split")
def _split(node, ins):
    cuts = np.cumsum(node.attrs["sizes"])[:-1]
    return np.split(ins[0], cuts, axis=node.attrs["axis"])


@impl("slice")
def _slice(node, ins):
    a = node.attrs  # explicit indices range(start, end, step) per dim: a negative end means "past index 0"
    return [ins[0][np.ix_(*[np.arange(s, e, st) for s, e, st in zip(a["starts"], a["ends"], a["steps"])])]]


@impl("pad")
def _pad(node, ins):
    pads = node.attrs["pads"]
    rank = ins[0].ndim
    return [np.pad(ins[0], [(pads[i], pads[i + rank]) for i in range(rank)], constant_values=node.attrs.get("value", 0.0))]


@impl("resize_nearest")
def _resize_nearest(node, ins):
    return [ins[0][:, node.attrs["rows"]][:, :, node.attrs["cols"]]]


@impl("softmax")
def _softmax(node, ins):
    return [nn.softmax(_f64(ins[0]) * node.attrs.get("beta", 1.0), -1)]


@impl("clamp")
def _clamp(node, ins):
    return [_act(node, _f64(ins[0]))]


@impl("leaky_relu")
def _leaky_relu(node, ins):
    x = _f64(ins[0])
    return [np.where(x >= 0, x, x * node.attrs["alpha"])]


@impl("sigmoid")
def _sigmoid(node, ins):
    return [nn.sigmoid(ins[0])]


@impl("tanh")
def _tanh(node, ins):
    return [np.tanh(_f64(ins[0]))]


@impl("lrn_scale")
def _lrn_scale(node, ins):
    a = node.attrs
    with np.errstate(divide="ignore", invalid="ignore"):
        return [np.power(a["bias"] + a["alpha_over_size"] * _f64(ins[0]), -a["beta"])]


@impl("hardsigmoid")
def _hardsigmoid(node, ins):
    return [nn.hardsigmoid(ins[0], node.attrs.get("alpha", 1.0 / 6.0), node.attrs.get("beta", 0.5))]


@impl("hardswish")
def _hardswish(node, ins):
    x = _f64(ins[0])
    return [x * nn.hardsigmoid(x)]


@impl("silu")
def _silu(node, ins):
    x = _f64(ins[0])
    return [x * nn.sigmoid(x)]


@impl("gelu")
def _gelu(node, ins):
    return [nn.gelu(ins[0], node.attrs.get("approximate", "none"))]
