"""int8 conv2d, depthwise_conv2d, fully_connected and pooling, as TFLite's reference kernels.

Accumulators are computed as sum(w * (x - input_zp)) over in-image taps plus
the bias, exactly, then wrapped to int32. The products are summed in float64:
every partial sum is an integer far below 2^53, so the result is exact.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from kiln.ir.graph import Graph, Node
from kiln.numerics.fixedpoint import clamp, trunc_div, wrap_int32
from kiln.numerics.params import channel_multipliers, mean_multiplier
from kiln.reference.int8_common import act_bounds, int8_impl, io_params, require_same_params, to_output


def _windows(x: np.ndarray, node: Node, kh: int, kw: int, out_hw: tuple[int, int], fill) -> np.ndarray:
    """NHWC input → (N, OH, OW, C, KH, KW) windows, padded with `fill`."""
    pt, pl, pb, pr = node.attrs.get("pads", [0, 0, 0, 0])
    sh, sw = node.attrs.get("strides", [1, 1])
    dh, dw = node.attrs.get("dilations", [1, 1])
    padded = np.pad(x, [(0, 0), (pt, pb), (pl, pr), (0, 0)], constant_values=fill)
    win = sliding_window_view(padded, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(1, 2))
    return win[:, ::sh, ::sw, :, ::dh, ::dw][:, : out_hw[0], : out_hw[1]]


def _weights(graph: Graph, node: Node, channel_axis: int):
    w = graph.tensors[node.inputs[1]]
    if w.quant is None or any(z != 0 for z in w.quant.zero_point):
        raise ValueError(f"weights {w.name!r} must be quantized symmetric int8 (zero point 0)")
    if w.quant.axis is not None and w.quant.axis != channel_axis:
        raise ValueError(f"weights {w.name!r} are quantized along axis {w.quant.axis}, expected {channel_axis}")
    return w


def _finish(graph: Graph, node: Node, acc: np.ndarray, bias: np.ndarray | None, channel_axis: int) -> list[np.ndarray]:
    (in_scale, _), (out_scale, out_zp) = io_params(graph, node)
    w = _weights(graph, node, channel_axis)
    channels = w.shape[channel_axis]
    mult, shift = channel_multipliers(in_scale, w.quant.scale, out_scale, channels)
    total = wrap_int32(acc + (0 if bias is None else np.asarray(bias, np.int64)))
    lo, hi = act_bounds(graph, node)
    return [to_output(total, mult.astype(np.int64), shift.astype(np.int64), out_zp, lo, hi)]


def _centered(graph: Graph, node: Node, x: np.ndarray) -> np.ndarray:
    (_, in_zp), _ = io_params(graph, node)
    return x.astype(np.float64) - in_zp


@int8_impl("conv2d")
def _conv2d(graph: Graph, node: Node, ins):
    x, w, bias = (ins + [None])[:3]
    _, kh, kw, _ = w.shape
    out_hw = graph.tensors[node.outputs[0]].shape[1:3]
    win = _windows(_centered(graph, node, x), node, kh, kw, out_hw, 0.0)
    acc = np.einsum("nhwcij,oijc->nhwo", win, w.astype(np.float64), optimize=True)
    return _finish(graph, node, np.rint(acc).astype(np.int64), bias, 0)


@int8_impl("depthwise_conv2d")
def _depthwise(graph: Graph, node: Node, ins):
    x, w, bias = (ins + [None])[:3]
    mult = int(node.attrs.get("depth_multiplier", 1))
    _, kh, kw, _ = w.shape
    out_hw = graph.tensors[node.outputs[0]].shape[1:3]
    xr = np.repeat(_centered(graph, node, x), mult, axis=3)
    win = _windows(xr, node, kh, kw, out_hw, 0.0)
    acc = np.einsum("nhwcij,ijc->nhwc", win, w[0].astype(np.float64), optimize=True)
    return _finish(graph, node, np.rint(acc).astype(np.int64), bias, 3)


@int8_impl("fully_connected")
def _fully_connected(graph: Graph, node: Node, ins):
    x, w, bias = (ins + [None])[:3]
    acc = _centered(graph, node, x) @ w.astype(np.float64).T
    return _finish(graph, node, np.rint(acc).astype(np.int64), bias, 0)


@int8_impl("max_pool2d")
def _max_pool(graph: Graph, node: Node, ins):
    require_same_params(graph, node)
    kh, kw = node.attrs["window"]
    out_hw = graph.tensors[node.outputs[0]].shape[1:3]
    best = _windows(ins[0].astype(np.int64), node, kh, kw, out_hw, -129).max(axis=(-2, -1))
    if np.any(best == -129):
        raise ValueError("a pooling window lies entirely in the padding")
    return [clamp(best, *act_bounds(graph, node)).astype(np.int8)]


def _rounded_mean(total: np.ndarray, count: np.ndarray | int) -> np.ndarray:
    """TFLite average pooling: (sum ± count/2) / count, truncating."""
    half = np.asarray(count) // 2
    return trunc_div(np.where(total > 0, total + half, total - half), count)


@int8_impl("avg_pool2d")
def _avg_pool(graph: Graph, node: Node, ins):
    require_same_params(graph, node)
    kh, kw = node.attrs["window"]
    out_hw = graph.tensors[node.outputs[0]].shape[1:3]
    total = _windows(ins[0].astype(np.int64), node, kh, kw, out_hw, 0).sum(axis=(-2, -1))
    ones = np.ones((1,) + ins[0].shape[1:3] + (1,), np.int64)
    count = _windows(ones, node, kh, kw, out_hw, 0).sum(axis=(-2, -1))
    if np.any(count == 0):
        raise ValueError("a pooling window lies entirely in the padding")
    return [clamp(_rounded_mean(total, count), *act_bounds(graph, node)).astype(np.int8)]


@int8_impl("global_avg_pool")
def _global_avg_pool(graph: Graph, node: Node, ins):
    """TFLite's int8 MEAN over H and W: the sum of (x - input_zp) requantized by in_scale/out_scale/count."""
    (in_scale, in_zp), (out_scale, out_zp) = io_params(graph, node)
    x = ins[0].astype(np.int64)
    mult, shift = mean_multiplier(in_scale, out_scale, x.shape[1] * x.shape[2])
    return [to_output((x - in_zp).sum(axis=(1, 2), keepdims=True), mult, shift, out_zp)]
