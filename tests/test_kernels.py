"""The C kernels in firmware_stubs/ against the reference executor.

Each case is a seeded random single-node graph: quantized graphs are lowered
and run on the C kernels (built with UBSan, output buffers guarded), and must
equal the int8 reference bit for bit; float graphs must match the float64
reference within FLOAT_RTOL/FLOAT_ATOL (float32 accumulation). The header is
checked against the lowering's ABI table, and the stubs compile warning-free
under strict C99.
"""
import ctypes
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from kernel_harness import RUNTIME, STRICT_FLAGS, STUBS, act, build_library, q, random_int8, run_lowered, single_node
from kiln.errors import KilnError
from kiln.ir.graph import Graph, Node, QuantParams, Tensor
from kiln.ir.ops import pool_out
from kiln.ir.serialize import dumps, loads
from kiln.ir.verify import verify
from kiln.lower import lower
from kiln.lower.abi import KERNELS
from kiln.lower.specialize import KILN_RQ_FAST, KILN_RQ_FULL, KILN_RQ_UNIFORM
from kiln.reference import float_ops  # noqa: F401  (registers the float implementations)
from kiln.reference.executor import FLOAT_IMPLS, run
from kiln.reference.int8 import INT8_IMPLS

CASES = int(os.environ.get("KILN_KERNEL_CASES", "12"))
FLOAT_RTOL, FLOAT_ATOL = 1e-5, 1e-5
CONFIG = {"profile": "portable"}


# -- seeded random single-node graphs ------------------------------------------------
ACTS = [(-math.inf, math.inf), (0.0, math.inf), (0.0, 6.0), (-1.0, 1.0)]


def _zp(rng) -> int:
    return int(rng.choice([-128, 127, 0, int(rng.integers(-128, 128))]))


def _scale(rng, lo: float = 0.005, hi: float = 0.05) -> float:
    return float(np.exp(rng.uniform(np.log(lo), np.log(hi))))


def _qact(rng, name, shape, dtype) -> Tensor:
    return act(name, shape, q(_scale(rng), _zp(rng)) if dtype == "int8" else None, dtype)


def _feed(rng, t: Tensor) -> np.ndarray:
    if t.dtype == "int8":
        return random_int8(rng, t.shape)
    return rng.uniform(-2, 2, size=t.shape).astype(np.float32)


CALIBRATED = {"conv2d", "depthwise_conv2d", "fully_connected", "batch_matmul", "add", "sub", "mul",
              "sigmoid", "tanh", "hardswish", "hardsigmoid", "silu", "gelu", "leaky_relu", "clamp", "lrn_scale", "global_avg_pool"}


def _graph(rng, op, inputs, outputs, attrs) -> tuple[Graph, dict[str, np.ndarray]]:
    g = single_node(op, inputs, outputs, attrs)
    feeds = {name: _feed(rng, g.tensors[name]) for name in g.inputs}
    if op in CALIBRATED and g.tensors[g.outputs[0]].dtype == "int8":
        _calibrate(rng, g, feeds)
    return g, feeds


def _real(g: Graph, name: str, values: dict[str, np.ndarray]) -> np.ndarray:
    """The real value of an int8 input (or an int32 bias at input scale x weight scale)."""
    t = g.tensors[name]
    v = values[name].astype(np.float64)
    if t.dtype == "int32":  # bias
        x, w = g.tensors[g.nodes[0].inputs[0]], g.tensors[g.nodes[0].inputs[1]]
        return v * x.quant.scale[0] * np.asarray(w.quant.scale)
    shape = [1] * len(t.shape)
    if t.quant.axis is not None:
        shape[t.quant.axis] = -1
    return (v - np.asarray(t.quant.zero_point).reshape(shape)) * np.asarray(t.quant.scale).reshape(shape)


def _calibrate(rng, g: Graph, feeds: dict[str, np.ndarray]) -> None:
    """Give the output the range of the real result (as a calibrating quantizer would), sometimes too narrow."""
    node = g.nodes[0]
    values = {**{k: t.data for k, t in g.tensors.items() if t.is_constant}, **feeds}
    y = FLOAT_IMPLS[node.op](node, [_real(g, i, values) for i in node.inputs])[0]
    lo, hi = min(float(np.min(y)), 0.0), max(float(np.max(y)), 0.0)
    scale = max(hi - lo, 0.05) / float(rng.uniform(200, 255))
    if rng.random() < 0.1:
        scale *= float(rng.uniform(0.05, 0.5))  # a narrow range: exercise saturation
    zp = int(np.clip(round(-128 - lo / scale), -128, 127))
    out = g.tensors[g.outputs[0]]
    g.tensors[out.name] = out.copy(quant=QuantParams((scale,), (zp,)))


def _act_attrs(rng) -> dict:
    lo, hi = ACTS[0] if rng.random() < 0.5 else ACTS[int(rng.integers(1, len(ACTS)))]
    return {"act_min": lo, "act_max": hi}


def _window(rng, size_range=(1, 8), k_range=(1, 3)):
    """Random spatial sizes, kernel, strides, dilations, pads with a valid (>= 1) output."""
    while True:
        h, w = (int(v) for v in rng.integers(*size_range, size=2, endpoint=True))
        kh, kw = (int(v) for v in rng.integers(*k_range, size=2, endpoint=True))
        strides = [int(v) for v in rng.integers(1, 3, size=2, endpoint=True)]
        dil = [int(v) for v in rng.integers(1, 2, size=2, endpoint=True)]
        pads = [int(rng.integers(0, kh)), int(rng.integers(0, kw)), int(rng.integers(0, kh)), int(rng.integers(0, kw))]
        oh, ow = h + pads[0] + pads[2] - dil[0] * (kh - 1), w + pads[1] + pads[3] - dil[1] * (kw - 1)
        if oh >= 1 and ow >= 1:
            return h, w, kh, kw, strides, dil, pads


def _weights(rng, shape, channel_axis, dtype) -> Tensor:
    if dtype == "float32":
        return Tensor("w", shape, "float32", data=rng.uniform(-1, 1, size=shape).astype(np.float32))
    channels = shape[channel_axis]
    per_channel = rng.random() < 0.7
    base = _scale(rng, 1e-3, 0.02)
    scales = tuple(base * _scale(rng, 0.2, 5.0) for _ in range(channels if per_channel else 1))
    quant = QuantParams(scales, (0,) * len(scales), channel_axis if per_channel else None)
    return Tensor("w", shape, "int8", quant=quant, data=random_int8(rng, shape))


def _bias(rng, channels, dtype) -> Tensor:
    if dtype == "float32":
        return Tensor("b", (channels,), "float32", data=rng.uniform(-1, 1, channels).astype(np.float32))
    bound = 2**30 if rng.random() < 0.1 else 2**15
    return Tensor("b", (channels,), "int32", data=rng.integers(-bound, bound, channels).astype(np.int32))


def _zero_bias(channels, dtype) -> Tensor:
    return Tensor("b", (channels,), dtype if dtype == "float32" else "int32", data=np.zeros(channels))


def conv_case(rng, dtype, op="conv2d", channels=(1, 2, 3, 5, 8), out_channels=(1, 3, 4, 7), size_range=(1, 8),
              k_range=(1, 3), mults=None):
    """A random conv2d (30% pointwise) or depthwise_conv2d: any window, stride, dilation and padding; a
    depthwise channel multiplier from `mults`, or (None) 1 or else 1 to 3."""
    pointwise = op == "conv2d" and rng.random() < 0.3
    h, w, kh, kw, strides, dil, pads = _window(rng, size_range, k_range)
    if pointwise:
        kh = kw = 1
        strides, pads = [1, 1], [0, 0, 0, 0]
    n, ic = int(rng.integers(1, 2, endpoint=True)), int(rng.choice(channels))
    mult = (int(rng.integers(1, 3, endpoint=True)) if rng.random() < 0.5 else 1) if mults is None else int(rng.choice(mults))
    oc = ic * mult if op == "depthwise_conv2d" else int(rng.choice(out_channels))
    oh = pool_out(h, kh, strides[0], pads[0], pads[2], dil[0])
    ow = pool_out(w, kw, strides[1], pads[1], pads[3], dil[1])
    wt = _weights(rng, (1, kh, kw, oc), 3, dtype) if op == "depthwise_conv2d" else _weights(rng, (oc, kh, kw, ic), 0, dtype)
    attrs = {"strides": strides, "dilations": dil, "pads": pads, **_act_attrs(rng)}
    if op == "depthwise_conv2d":
        attrs["depth_multiplier"] = mult
    inputs = [_qact(rng, "x", (n, h, w, ic), dtype), wt] + ([_bias(rng, oc, dtype)] if rng.random() < 0.9 else [])
    return _graph(rng, op, inputs, [_qact(rng, "y", (n, oh, ow, oc), dtype)], attrs)


def fc_case(rng, dtype, most=(3, 20, 10)):
    """A random fully_connected of at most `most` (batches, in_features, out_features)."""
    b, i, o = (int(v) for v in rng.integers(1, most, endpoint=True))
    w = _weights(rng, (o, i), 0, dtype)
    if dtype == "int8" and rng.random() < 0.3:  # tiny accumulators: multipliers above 1 (positive shifts)
        i = int(rng.integers(1, 3, endpoint=True))
        w = Tensor("w", (o, i), "int8", quant=w.quant, data=rng.integers(-2, 2, (o, i), endpoint=True).astype(np.int8))
    inputs = [_qact(rng, "x", (b, i), dtype), w, _bias(rng, o, dtype) if rng.random() < 0.5 else _zero_bias(o, dtype)]
    return _graph(rng, "fully_connected", inputs, [_qact(rng, "y", (b, o), dtype)], _act_attrs(rng))


def _broadcast_shapes(rng):
    rank = int(rng.integers(1, 6, endpoint=True))
    out = [int(v) for v in rng.integers(1, 5, size=rank, endpoint=True)]
    if rank > 4:
        return tuple(out), tuple(out)  # same shapes merge into one dimension
    def operand():
        dims = [d if rng.random() < 0.6 else 1 for d in out]
        return tuple(dims[int(rng.integers(0, rank)):] if rng.random() < 0.3 else dims)
    return operand(), operand()


def binary_case(rng, dtype, op):
    sa, sb = _broadcast_shapes(rng)
    out = tuple(int(d) for d in np.broadcast_shapes(sa, sb))
    g, feeds = _graph(rng, op, [_qact(rng, "a", sa, dtype), _qact(rng, "b", sb, dtype)], [_qact(rng, "y", out, dtype)], _act_attrs(rng))
    if op == "div":
        feeds["b"] = np.where(np.abs(feeds["b"]) < 0.5, 0.5, feeds["b"]).astype(np.float32)
    return g, feeds


def pool_case(rng, dtype, op):
    h, w, kh, kw, strides, _, pads = _window(rng, k_range=(1, 3))
    n, c = int(rng.integers(1, 2, endpoint=True)), int(rng.choice([1, 3, 4]))
    x = _qact(rng, "x", (n, h, w, c), dtype)
    oh, ow = pool_out(h, kh, strides[0], pads[0], pads[2]), pool_out(w, kw, strides[1], pads[1], pads[3])
    y = act("y", (n, oh, ow, c), x.quant, dtype)
    return _graph(rng, op, [x], [y], {"window": [kh, kw], "strides": strides, "pads": pads, **_act_attrs(rng)})


def global_pool_case(rng, dtype):
    n, h, w, c = (int(v) for v in rng.integers(1, [2, 9, 9, 6], endpoint=True))
    x = _qact(rng, "x", (n, h, w, c), dtype)
    return _graph(rng, "global_avg_pool", [x], [act("y", (n, 1, 1, c), x.quant, dtype)], {})


def batch_matmul_case(rng, dtype):
    lead = tuple(int(v) for v in rng.integers(1, 3, size=int(rng.integers(0, 2, endpoint=True)), endpoint=True))
    m, k, n = (int(v) for v in rng.integers(1, [5, 24, 5], endpoint=True))
    a, b = _qact(rng, "a", (*lead, m, k), dtype), _qact(rng, "b", (*lead, k, n), dtype)
    return _graph(rng, "batch_matmul", [a, b], [_qact(rng, "y", (*lead, m, n), dtype)], _act_attrs(rng))


def layer_norm_case(rng, dtype):
    """Rows of 1 to 40 values (a constant row among them), gamma and beta of mixed signs, eps from 0 to 0.1;
    int8 outputs get the range of the real result, sometimes too narrow."""
    lead = tuple(int(v) for v in rng.integers(1, 4, size=int(rng.integers(0, 2, endpoint=True)), endpoint=True))
    size = int(rng.integers(1, 40, endpoint=True))
    x = _qact(rng, "x", (*lead, size), dtype)
    gamma = Tensor("gamma", (size,), "float32", data=(rng.normal(1.0, 0.5, size) * rng.choice([1, -1], size)).astype(np.float32))
    beta = Tensor("beta", (size,), "float32", data=rng.normal(0.0, 0.5, size).astype(np.float32))
    eps = float(rng.choice([0.0, 1e-5, 1e-3, 0.1]))
    g, feeds = _graph(rng, "layer_norm", [x, gamma, beta], [act("y", x.shape, x.quant, dtype)], {"epsilon": eps})
    if rng.random() < 0.2:
        feeds["x"][..., :] = feeds["x"][..., :1]  # every row constant
    if dtype == "int8":
        real = FLOAT_IMPLS["layer_norm"](g.nodes[0], [_real(g, "x", feeds), gamma.data, beta.data])[0]
        lo, hi = min(float(real.min()), 0.0), max(float(real.max()), 0.0)
        scale = max(hi - lo, 0.05) / float(rng.uniform(200, 255)) * (float(rng.uniform(0.2, 0.6)) if rng.random() < 0.1 else 1.0)
        g.tensors["y"] = g.tensors["y"].copy(quant=QuantParams((scale,), (int(np.clip(round(-128 - lo / scale), -128, 127)),)))
    return g, feeds


def softmax_case(rng, dtype):
    shape = tuple(int(v) for v in rng.integers(1, [3, 4, 40], endpoint=True))
    x = act("x", shape, q(_scale(rng, 1e-2, 4.0), _zp(rng)) if dtype == "int8" else None, dtype)
    y = act("y", shape, q(1 / 256, -128) if dtype == "int8" else None, dtype)
    return _graph(rng, "softmax", [x], [y], {"beta": float(rng.choice([1.0, 0.5, 2.0]))})


def elementwise_case(rng, dtype, op):
    shape = tuple(int(v) for v in rng.integers(2, 8, size=int(rng.integers(1, 3, endpoint=True)), endpoint=True))
    attrs = {"leaky_relu": {"alpha": 0.07}, "hardsigmoid": {"alpha": 0.2, "beta": 0.5}, "clamp": {"act_min": -0.5, "act_max": 0.75},
             "lrn_scale": {"bias": 2.0, "alpha_over_size": 0.1, "beta": 0.75},
             "gelu": {"approximate": str(rng.choice(["none", "tanh"]))}}.get(op, {})
    x = act("x", shape, q(_scale(rng, 0.01, 0.06), _zp(rng)) if dtype == "int8" else None, dtype)
    return _graph(rng, op, [x], [_qact(rng, "y", shape, dtype)], attrs)


def quantize_case(rng, op):
    shape = tuple(int(v) for v in rng.integers(1, 6, size=2, endpoint=True))
    qp = q(_scale(rng, 1e-2, 1.0), _zp(rng))
    if op == "quantize":
        g, feeds = _graph(rng, op, [act("x", shape, None, "float32")], [act("y", shape, qp)], {"to": "int8"})
        scale = g.tensors["y"].quant.scale[0]
        halves = rng.integers(-600, 600, size=shape) * np.float32(scale) / 2  # many exact ties
        feeds["x"] = np.where(rng.random(shape) < 0.5, halves, feeds["x"] * 100).astype(np.float32)
        return g, feeds
    return _graph(rng, op, [act("x", shape, qp)], [act("y", shape, None, "float32")], {})


def concat_case(rng, dtype):
    rank = int(rng.integers(1, 4, endpoint=True))
    base = [int(v) for v in rng.integers(1, 4, size=rank, endpoint=True)]
    axis = int(rng.integers(-rank, rank))
    shared = q(_scale(rng), _zp(rng))
    inputs = []
    for i in range(int(rng.integers(2, 3, endpoint=True))):
        shape = list(base)
        shape[axis] = int(rng.integers(1, 3, endpoint=True))
        quant = (shared if rng.random() < 0.5 else q(_scale(rng), _zp(rng))) if dtype == "int8" else None
        inputs.append(act(f"x{i}", tuple(shape), quant, dtype))
    out = list(base)
    out[axis] = sum(t.shape[axis] for t in inputs)
    return _graph(rng, "concat", inputs, [act("y", tuple(out), shared if dtype == "int8" else None, dtype)], {"axis": axis})


def split_case(rng, dtype):
    rank = int(rng.integers(1, 4, endpoint=True))
    shape = [int(v) for v in rng.integers(1, 4, size=rank, endpoint=True)]
    axis = int(rng.integers(0, rank))
    shape[axis] = int(rng.integers(2, 6, endpoint=True))
    cut = int(rng.integers(1, shape[axis]))
    x = _qact(rng, "x", tuple(shape), dtype)
    outs = []
    for i, size in enumerate((cut, shape[axis] - cut)):
        s = list(shape)
        s[axis] = size
        outs.append(act(f"y{i}", tuple(s), x.quant if dtype == "float32" or rng.random() < 0.5 else q(_scale(rng), _zp(rng)), dtype))
    return _graph(rng, "split", [x], outs, {"axis": axis, "sizes": [cut, shape[axis] - cut]})


def slice_case(rng, dtype):
    rank = int(rng.integers(1, 4, endpoint=True))
    shape = [int(v) for v in rng.integers(1, 5, size=rank, endpoint=True)]
    starts, ends, steps, out = [], [], [], []
    for d in shape:
        step = int(rng.choice([1, 1, 2, -1, -2]))
        a, b = sorted(int(v) for v in rng.integers(0, d, size=2, endpoint=False))
        step = abs(step) if a == 0 else step  # normalization never emits an end below 0
        s, e = (a, b + 1) if step > 0 else (b, a - 1)
        starts.append(s), ends.append(e), steps.append(step), out.append(len(range(s, e, step)))
    x = _qact(rng, "x", tuple(shape), dtype)
    return _graph(rng, "slice", [x], [act("y", tuple(out), x.quant, dtype)], {"starts": starts, "ends": ends, "steps": steps})


def transpose_case(rng, dtype):
    rank = int(rng.integers(2, 6, endpoint=True))
    shape = [int(v) for v in rng.integers(1, 4, size=rank, endpoint=True)]
    if rank > 4:
        shape[int(rng.integers(rank))] = 1
        shape[-1] = 1
    perm = [int(v) for v in rng.permutation(rank)]
    x = _qact(rng, "x", tuple(shape), dtype)
    return _graph(rng, "transpose", [x], [act("y", tuple(shape[p] for p in perm), x.quant, dtype)], {"perm": perm})


def pad_case(rng, dtype):
    rank = int(rng.integers(1, 4, endpoint=True))
    shape = [int(v) for v in rng.integers(1, 4, size=rank, endpoint=True)]
    pads = [int(v) if rng.random() < 0.6 else 0 for v in rng.integers(0, 3, size=2 * rank, endpoint=True)]
    out = tuple(d + pads[i] + pads[i + rank] for i, d in enumerate(shape))
    x = _qact(rng, "x", tuple(shape), dtype)
    return _graph(rng, "pad", [x], [act("y", out, x.quant, dtype)], {"pads": pads, "value": float(rng.choice([0.0, 0.5, -3.0]))})


def resize_case(rng, dtype):
    n, h, w, c = (int(v) for v in rng.integers(1, [2, 4, 4, 3], endpoint=True))
    rows = [int(v) for v in rng.integers(0, h, size=int(rng.integers(1, 7)))]
    cols = [int(v) for v in rng.integers(0, w, size=int(rng.integers(1, 7)))]
    x = _qact(rng, "x", (n, h, w, c), dtype)
    return _graph(rng, "resize_nearest", [x], [act("y", (n, len(rows), len(cols), c), x.quant, dtype)], {"rows": rows, "cols": cols})


def reshape_case(rng, dtype):
    shape = tuple(int(v) for v in rng.integers(1, 4, size=3, endpoint=True))
    x = _qact(rng, "x", shape, dtype)
    out = (shape[0] * shape[1], shape[2])
    return _graph(rng, "reshape", [x], [act("y", out, x.quant, dtype)], {"shape": list(out)})

GENERATORS = {
    "conv2d": lambda rng, dt: conv_case(rng, dt, "conv2d"),
    "depthwise_conv2d": lambda rng, dt: conv_case(rng, dt, "depthwise_conv2d"),
    "fully_connected": fc_case,
    "batch_matmul": batch_matmul_case,
    "layer_norm": layer_norm_case,
    **{op: (lambda op: lambda rng, dt: binary_case(rng, dt, op))(op) for op in ("add", "sub", "mul")},
    **{op: (lambda op: lambda rng, dt: pool_case(rng, dt, op))(op) for op in ("max_pool2d", "avg_pool2d")},
    "global_avg_pool": global_pool_case,
    "softmax": softmax_case,
    **{op: (lambda op: lambda rng, dt: elementwise_case(rng, dt, op))(op)
       for op in ("sigmoid", "tanh", "hardswish", "hardsigmoid", "silu", "gelu", "leaky_relu", "clamp", "lrn_scale")},
    "concat": concat_case,
    "split": split_case,
    "slice": slice_case,
    "transpose": transpose_case,
    "pad": pad_case,
    "resize_nearest": resize_case,
    "reshape": reshape_case,
}
FLOAT_ONLY = {"div": lambda rng, dt: binary_case(rng, dt, "div")}

def residual_case(rng):
    """A random conv2d (any window, stride, padding, channel count) whose output alone feeds an add or sub
    with another input of its shape, either operand first: the lower stage fuses the two when the add's
    arithmetic fits its table (kiln_conv2d_add_s8), else they stay two kernels."""
    g, feeds = conv_case(rng, "int8", "conv2d", channels=(1, 3, 4, 8, 9, 16), out_channels=(1, 2, 5, 8), size_range=(1, 9))
    conv = g.nodes[0]
    t = g.tensors.pop(conv.outputs[0]).copy(name="t")
    g.add_tensor(t)
    g.nodes[0] = conv.copy(outputs=["t"])
    g.outputs = ["t"]
    r = _qact(rng, "r", t.shape, "int8")
    g.add_tensor(r)
    feeds["r"] = random_int8(rng, t.shape)
    op, first = ("add", "sub")[int(rng.integers(2))], bool(rng.integers(2))
    values = {"t": run(g, feeds, table=INT8_IMPLS)["t"], "r": feeds["r"]}
    real = {n: (values[n].astype(np.float64) - g.tensors[n].quant.zero_point[0]) * g.tensors[n].quant.scale[0] for n in values}
    y_real = (real["t"] - real["r"] if first else real["r"] - real["t"]) if op == "sub" else real["t"] + real["r"]
    lo, hi = min(float(y_real.min()), 0.0), max(float(y_real.max()), 0.0)
    scale = max(hi - lo, 0.05) / float(rng.uniform(200, 255))
    y = act("y", t.shape, q(scale, int(np.clip(round(-128 - lo / scale), -128, 127))))
    g.add_tensor(y)
    g.nodes.append(Node("s", op, ["t", "r"] if first else ["r", "t"], ["y"], _act_attrs(rng)))
    g.inputs, g.outputs = ["x", "r"], ["y"]
    return g, feeds


def table_add_case(rng):
    """An int8 add or sub of two inputs of one shape, long enough for the unrolled loops and their tails:
    kiln_add_table_s8 when the arithmetic fits, kiln_add_s8/kiln_sub_s8 otherwise."""
    shape = (int(rng.integers(1, 40)), int(rng.integers(1, 9)))
    op = ("add", "sub")[int(rng.integers(2))]
    a, b = _qact(rng, "a", shape, "int8"), _qact(rng, "b", shape, "int8")
    if rng.random() < 0.5:  # inputs of close scales, as residual connections have: the common output shifts
        b = b.copy(quant=q(a.quant.scale[0] * float(rng.uniform(0.5, 2.0)), b.quant.zero_point[0]))
    return _graph(rng, op, [a, b], [_qact(rng, "y", shape, "int8")], _act_attrs(rng))


def requant_sweep_case(rng):
    """A 1x1 conv or depthwise conv whose input channels each see every int8 value: per output channel
    the accumulators run through about 256 consecutive values around a random bias, and the channels'
    multipliers span right shifts of 1 to 12 (some exact powers of two, whose products land on the
    roundings' ties), so both roundings of the requantization meet their ties on both signs. Variants:
    a 1x1 conv, one with a padded column (kiln_conv2d_s8 instead of the 1x1 kernel) or a depthwise conv
    (channel multiplier 1 or 2), each also with one multiplier above 1 (a left shift: the general
    requantization)."""
    oc, variant = 16, int(rng.integers(6))
    depthwise, ic = variant >= 4, (int(rng.choice([8, 16])) if variant >= 4 else 1)
    x = np.stack([rng.permutation(np.arange(-128, 128)) for _ in range(ic)], axis=-1).astype(np.int8).reshape(1, 16, 16, ic)
    real = np.where(np.arange(oc) % 4 == 0, 2.0 ** -rng.integers(1, 12, oc), 2.0 ** rng.uniform(-12, -0.5, oc))
    if variant % 2:
        real[int(rng.integers(oc))] = float(rng.uniform(1.0, 4.0))
    in_scale, out_scale = 0.02, 0.05
    w_scale = tuple(float(v) for v in real * out_scale / in_scale)
    w_shape, axis = ((1, 1, 1, oc), 3) if depthwise else ((oc, 1, 1, 1), 0)
    weights = Tensor("w", w_shape, "int8", quant=QuantParams(w_scale, (0,) * oc, axis),
                     data=rng.choice([-3, -2, -1, 1, 2, 3], w_shape).astype(np.int8))
    bias = Tensor("b", (oc,), "int32", data=rng.integers(-600, 600, oc).astype(np.int32))
    pads = [0, 0, 0, 1] if variant in (2, 3) else [0, 0, 0, 0]
    attrs = {"strides": [1, 1], "dilations": [1, 1], "pads": pads, **_act_attrs(rng)}
    if depthwise:
        attrs["depth_multiplier"] = oc // ic
    g = single_node("depthwise_conv2d" if depthwise else "conv2d",
                    [act("x", x.shape, q(in_scale, int(rng.integers(-5, 5)))), weights, bias],
                    [act("y", (1, 16, 16 + pads[3], oc), q(out_scale, int(rng.integers(-128, 128))))], attrs)
    return g, {"x": x}


MUL_SHIFTS = (-24, -23, -22, -12, -7, -2, -1, 0, 1, 3, 14)  # the fast requantization's edges and past them both ways


def _mul_shapes(rng) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Operand shapes of kiln_mul_s8's rows: one shape (1 value, fewer than 4, odd, long), a map times a
    per-channel vector or a scalar (either operand first), or any broadcast."""
    kind = int(rng.integers(5))
    if kind == 0:
        rank = int(rng.integers(1, 4, endpoint=True))
        shape = tuple(int(d) for d in rng.integers(1, 7, rank, endpoint=True))
        shape = shape if rng.random() < 0.7 else (int(rng.choice([1, 2, 3, 5, 37, 61, 64])),)
        return shape, shape
    if kind in (1, 2):
        c = int(rng.choice([1, 2, 3, 4, 5, 7, 8, 12, 13, 16, 19]))
        m = (int(rng.integers(1, 3)), int(rng.integers(1, 5)), int(rng.integers(1, 5)), c)
        small = (c,) if kind == 1 and rng.random() < 0.5 else (1, 1, 1, c) if kind == 1 else (1,)
        return (m, small) if rng.random() < 0.5 else (small, m)
    if kind == 3:
        return (int(rng.integers(1, 40)),), (1,)
    return _broadcast_shapes(rng)


def mul_case(rng):
    """An int8 mul over _mul_shapes with random zero points (int8's ends included) and activation range: half
    with the output calibrated to the product's range, half with a multiplier of a random right or left shift
    (MUL_SHIFTS: KILN_RQ_FAST's ends, just past them, multipliers above 1), some an exact power of two."""
    sa, sb = _mul_shapes(rng)
    out = tuple(int(d) for d in np.broadcast_shapes(sa, sb))
    a, b = _qact(rng, "a", sa, "int8"), _qact(rng, "b", sb, "int8")
    g = single_node("mul", [a, b], [_qact(rng, "y", out, "int8")], _act_attrs(rng))
    feeds = {"a": random_int8(rng, sa), "b": random_int8(rng, sb)}
    if rng.random() < 0.5:
        _calibrate(rng, g, feeds)
    else:
        shift = int(rng.choice(MUL_SHIFTS))
        real = 2.0 ** (shift - 1) * (1.0 if rng.random() < 0.25 else float(rng.uniform(1.0, 2.0)))
        y = g.tensors["y"]
        g.tensors["y"] = y.copy(quant=q(a.quant.scale[0] * b.quant.scale[0] / real, y.quant.zero_point[0]))
    return g, feeds


MUL_KINDS = ("rows", "channel", "scalar", "scalar first")
MUL_CLAMPS = {"full": None, "relu": (0.0, math.inf), "both": (-1.0, 1.0), "below zero": (-3.0, -0.5)}
MUL_PATH_CASES = [(kind, clamp, rest) for kind in MUL_KINDS for clamp in MUL_CLAMPS for rest in range(4)
                  if (rest + MUL_KINDS.index(kind) + list(MUL_CLAMPS).index(clamp)) % 2 == 0]


def mul_path_case(rng, kind: str, clamp: str, rest: int):
    """An int8 mul with KILN_RQ_FAST that takes one path of kiln_mul_s8: rows of one shape, a map times a
    per-channel vector, a map times a scalar (either first), each over the whole int8 range (KILN_RQ_FULL),
    with a ReLU (lower bound only), clamped on both sides, or below zero (one value at a time: the lanes
    fold the upper bound into the zero point only up from zero), rows of 4k + rest values."""
    n = 4 * int(rng.integers(1, 6)) + rest
    m = (1, int(rng.integers(2, 4)), int(rng.integers(1, 4)), n)
    sa, sb = {"rows": ((n,), (n,)), "channel": (m, (n,)), "scalar": ((n,), (1,)), "scalar first": ((1,), (1, n))}[kind]
    a = act("a", sa, q(float(rng.uniform(0.02, 0.1)), _zp(rng)))
    b = act("b", sb, q(float(rng.uniform(0.002, 0.02)), _zp(rng)))
    out = tuple(int(d) for d in np.broadcast_shapes(sa, sb))
    bounds = MUL_CLAMPS[clamp]
    attrs = {} if bounds is None else {"act_min": bounds[0], "act_max": bounds[1]}
    y = act("y", out, q(0.01, -20 if clamp == "relu" else int(rng.integers(-10, 10))))
    return single_node("mul", [a, b], [y], attrs), {"a": random_int8(rng, sa), "b": random_int8(rng, sb)}


def mul_path(node) -> str:
    """Which path of kiln_mul_s8 (firmware_stubs/binary.c) a call takes, from its parameters."""
    p = dict(zip(node.attrs["param_names"], node.attrs["params"]))
    if not p["requant"] & KILN_RQ_FAST:
        return "mul general"
    rows = "scalar first" if p["a_s3"] == 0 else "scalar" if p["b_s3"] == 0 else "channel" if p["b_s2"] == 0 and p["d2"] > 1 else "rows"
    clamp = ("full" if p["requant"] & KILN_RQ_FULL else "relu" if p["act_max"] == 127
             else "both" if p["act_max"] >= p["out_zp"] else "below zero")
    lanes = p["d3"] >= 4 and clamp != "below zero"
    return f"mul {rows}, {clamp}, {'lanes' if lanes else 'no lanes'}, rest {p['d3'] % 4}"


# Shapes that reach every blocked path of the int8 conv/depthwise/matrix kernels: channel counts
# with every remainder modulo 4 and 8 (the SIMD widths), rows longer than 8, odd output widths,
# windows partly in the padding on every side, strides and dilations, windows of up to 7x7 taps. tests/test_cortex_m_kernels.py
# runs the same cases on the Cortex-M4's DSP path.
BLOCK_CASES = {
    "conv2d": lambda rng: conv_case(rng, "int8", "conv2d", channels=(1, 3, 4, 8, 9, 16, 27), out_channels=(1, 2, 5, 8),
                                    size_range=(1, 11), k_range=(1, 4)),
    "conv2d_large_window": lambda rng: conv_case(rng, "int8", "conv2d", channels=(2, 3, 8), out_channels=(1, 2, 3),
                                                 size_range=(4, 9), k_range=(4, 7)),
    "depthwise_conv2d": lambda rng: conv_case(rng, "int8", "depthwise_conv2d", channels=(3, 4, 5, 8, 12, 13, 16),
                                              size_range=(1, 11), k_range=(1, 4)),
    "depthwise_mult4": lambda rng: conv_case(rng, "int8", "depthwise_conv2d", channels=(1, 2, 3), size_range=(1, 12),
                                             k_range=(1, 10), mults=(4, 8, 12)),  # four output channels per input value
    "fully_connected": lambda rng: fc_case(rng, "int8", most=(3, 70, 9)),
    "fully_connected_few": lambda rng: fc_case(rng, "int8", most=(5, 16, 37)),  # 16 inputs or fewer: unrolled rows
    "residual": residual_case,
    "table_add": table_add_case,
    "requant_sweep": requant_sweep_case,
    "mul": mul_case,
}


@pytest.fixture(scope="session")
def lib(tmp_path_factory):
    sanitize = os.environ.get("KILN_STUB_SANITIZE", "undefined")
    return ctypes.CDLL(str(build_library(tmp_path_factory.mktemp("stubs"), sanitize)))


@pytest.fixture(scope="session")
def scratch_lib(tmp_path_factory):
    """The library with the scratch paths the DSP builds take (the portable builds keep the direct loops)."""
    sanitize = os.environ.get("KILN_STUB_SANITIZE", "undefined")
    return ctypes.CDLL(str(build_library(tmp_path_factory.mktemp("stubs_scratch"), sanitize, ("KILN_SCRATCH_PATHS_ALWAYS",))))


def check_case(lib, graph, feeds, seed, config=CONFIG, scratch_used=None):
    verify(graph, levels=("kernel",))
    before = dumps(graph)
    lowered = lower(graph, config)
    assert dumps(graph) == before, "lower mutated its input"
    got = run_lowered(lib, lowered, feeds, seed, scratch_used)
    want = run(graph, feeds, table=INT8_IMPLS)
    for name in graph.outputs:
        if graph.tensors[name].dtype == "float32":
            np.testing.assert_allclose(got[name], want[name], rtol=FLOAT_RTOL, atol=FLOAT_ATOL, err_msg=name)
        else:
            assert np.array_equal(got[name], want[name]), f"{name}: C {got[name].ravel()} != reference {want[name].ravel()}"
    return lowered


@pytest.mark.parametrize("op", sorted(GENERATORS))
def test_int8_kernels_match_reference(lib, op):
    for seed in range(CASES):
        graph, feeds = GENERATORS[op](np.random.default_rng([seed, 8]), "int8")
        check_case(lib, graph, feeds, seed)


@pytest.mark.parametrize("paths", ["direct", "scratch"])
@pytest.mark.parametrize("op", sorted(BLOCK_CASES))
def test_int8_blocked_kernels_match_reference(lib, scratch_lib, op, paths):
    """Given scratch: the portable builds' direct loops (a fused conv + add runs bands of rows through scratch),
    and the scratch paths of the DSP builds."""
    for seed in range(3 * CASES):
        graph, feeds = BLOCK_CASES[op](np.random.default_rng([seed, 16]))
        used: list[bool] = []
        lowered = check_case(lib if paths == "direct" else scratch_lib, graph, feeds, seed, scratch_used=used)
        if op == "residual" and paths == "direct":
            assert used[[n.attrs["kernel"] for n in lowered.nodes if "scratch_bytes" in n.attrs].index("kiln_conv2d_add_s8")]


@pytest.mark.parametrize("op", sorted(BLOCK_CASES))
def test_int8_blocked_kernels_without_scratch_match_reference(lib, op):
    """The same cases given no scratch (kernels.scratch_limit = 0): every kernel's path without it."""
    for seed in range(CASES):
        graph, feeds = BLOCK_CASES[op](np.random.default_rng([seed, 16]))
        used = []
        lowered = check_case(lib, graph, feeds, seed, {**CONFIG, "scratch_limit": 0}, used)
        assert not any(used) and all(n.attrs.get("scratch_bytes", 0) == 0 for n in lowered.nodes)


def _fast_paths(lib) -> set[tuple[str, int, bool]]:
    """(kernel, KILN_RQ_* facts, scratch written) of every kernel call the blocked cases make."""
    seen = set()
    for op in sorted(BLOCK_CASES):
        for seed in range(36):  # the seeds the assertions below were written for, whatever KILN_KERNEL_CASES says
            graph, feeds = BLOCK_CASES[op](np.random.default_rng([seed, 16]))
            used: list[bool] = []
            lowered = lower(graph, CONFIG)
            run_lowered(lib, lowered, feeds, seed, used)
            calls = [n for n in lowered.nodes if "scratch_bytes" in n.attrs]
            for node, wrote in zip(calls, used):
                params = dict(zip(node.attrs["param_names"], node.attrs["params"]))
                seen.add((node.attrs["kernel"], params["requant"], wrote))
    return seen


def test_blocked_cases_reach_every_fast_path(scratch_lib):
    """Each scratch kernel runs its scratch path with the fast requantization over the whole int8 range,
    with a narrower activation range, and with the general requantization."""
    seen = _fast_paths(scratch_lib)
    for kernel in ("kiln_conv2d_s8", "kiln_conv2d_1x1_s8", "kiln_depthwise_conv2d_s8", "kiln_conv2d_add_s8"):
        for facts in (KILN_RQ_FAST | KILN_RQ_FULL, KILN_RQ_FAST, KILN_RQ_FULL):
            assert (kernel, facts, True) in seen, (kernel, facts)


def test_few_input_fully_connected_cases_reach_every_instance(lib):
    """The blocked fully_connected_few cases take the few-input path (KILN_RQ_FAST, at most 16 inputs) with
    every group count, every k % 4, channel counts that leave 1 to 3 channels after the 4-channel blocks,
    several rows, and each specialised requantization (shared parameters, whole int8 range, narrower)."""
    seen = set()
    for seed in range(3 * CASES):
        graph, feeds = BLOCK_CASES["fully_connected_few"](np.random.default_rng([seed, 16]))
        node = lower(graph, CONFIG).nodes[0]
        p = dict(zip(node.attrs["param_names"], node.attrs["params"]))
        if node.attrs["kernel"] == "kiln_fully_connected_few_s8":
            k, cols = p["in_features"], p["out_features"]
            seen |= {("groups", -(-k // 4)), ("k % 4", k % 4), ("facts", p["requant"]), ("rows > 1", p["batches"] > 1),
                     ("cols % 4", cols % 4)}
    assert {("groups", g) for g in range(1, 5)} | {("k % 4", r) for r in range(4)} <= seen, seen
    assert {("cols % 4", r) for r in range(4)} | {("rows > 1", True)} <= seen, seen
    full, uniform = KILN_RQ_FAST | KILN_RQ_FULL, KILN_RQ_FAST | KILN_RQ_FULL | KILN_RQ_UNIFORM
    assert {("facts", full), ("facts", uniform)} <= seen and any(f & KILN_RQ_FULL == 0 for t, f in seen if t == "facts"), seen


def test_mul_paths_match_reference_and_are_each_reached(lib, scratch_lib):
    """kiln_mul_s8's lanes (the DSP builds' path; scratch_lib runs its C) and its loop of one value at a time
    (lib) on every row kind and clamp with each remainder of 4, bit-exact; the random cases add rows shorter
    than 4 and the general requantization (shifts past KILN_RQ_FAST's ends, multipliers above 1)."""
    seen = set()
    for i, case in enumerate(MUL_PATH_CASES):
        graph, feeds = mul_path_case(np.random.default_rng([i, 17]), *case)
        for library in (lib, scratch_lib):
            seen.add(mul_path(check_case(library, graph, feeds, i).nodes[0]))
    for seed in range(36):  # the blocked cases' seeds (run there), whatever KILN_KERNEL_CASES says
        graph, _ = mul_case(np.random.default_rng([seed, 16]))
        seen.add(mul_path(lower(graph, CONFIG).nodes[0]))
    lanes = {f"mul {kind}, {clamp}, {'no lanes' if clamp == 'below zero' else 'lanes'}, rest {rest}" for kind, clamp, rest in MUL_PATH_CASES}
    assert lanes | {"mul general"} <= seen, sorted((lanes | {"mul general"}) - seen)
    assert {kind for kind in MUL_KINDS if any(p.startswith(f"mul {kind},") and "rest 0" not in p for p in seen)} == set(MUL_KINDS)
    assert any("no lanes" in p for p in seen), seen


def _fc_fast(in_features: int, fast: bool) -> Graph:
    """A fully connected layer with `in_features` inputs whose requantization is KILN_RQ_FAST or (an output
    scale below the product of the input and weight scales: a multiplier above 1) not."""
    rng = np.random.default_rng(in_features)
    w = Tensor("w", (5, in_features), "int8", quant=QuantParams((0.01,), (0,)), data=random_int8(rng, (5, in_features)))
    y_scale = 0.05 if fast else 0.0001
    return single_node("fully_connected", [act("x", (1, in_features), q(0.02, 3)), w], [act("y", (1, 5), q(y_scale, 0))], {})


@pytest.mark.parametrize("in_features, fast, kernel", [(1, True, "kiln_fully_connected_few_s8"),
                                                       (16, True, "kiln_fully_connected_few_s8"),
                                                       (17, True, "kiln_fully_connected_s8"),
                                                       (16, False, "kiln_fully_connected_s8")])
def test_lower_picks_the_few_input_kernel(in_features, fast, kernel):
    """Fully connected layers with at most 16 inputs and KILN_RQ_FAST call kiln_fully_connected_few_s8, a
    symbol of its own so that images without such a layer do not link its code; the others the general one."""
    node = lower(_fc_fast(in_features, fast), CONFIG).nodes[0]
    requant = dict(zip(node.attrs["param_names"], node.attrs["params"]))["requant"]
    assert (node.attrs["kernel"], bool(requant & KILN_RQ_FAST)) == (kernel, fast)


def _run_with_scratch(lib, lowered, feeds, size: int) -> tuple[dict, bool]:
    """Run a one-call lowered graph giving its kernel `size` bytes of scratch; returns outputs and whether it wrote them."""
    node = lowered.nodes[0]
    names = list(node.attrs["param_names"])
    params = list(node.attrs["params"])
    params[names.index("scratch_bytes")] = size
    g = lowered.copy()
    g.nodes = [node.copy(attrs={**node.attrs, "params": params, "scratch_bytes": size})]
    used: list[bool] = []
    return run_lowered(lib, g, feeds, 0, used), used[0]


def _depthwise_min_scratch(p: dict[str, int]) -> int:
    """kiln_depthwise_conv2d_s8's scratch with a strip of one window's rows (runtime/kiln_kernels.h)."""
    cols = (p["out_w"] - 1) * p["stride_w"] + (p["k_w"] - 1) * p["dil_w"] + 1
    return 4 * (2 * p["k_h"] * p["k_w"] + 24) + 3 + 8 * cols * ((p["k_h"] - 1) * p["dil_h"] + 1)


@pytest.mark.parametrize("op", ["conv2d", "depthwise_conv2d", "residual"])
def test_kernels_take_scratch_exactly_as_stated(scratch_lib, op):
    """The header's scratch sizes are the kernels': one byte less and the kernel takes its path without
    scratch (and still matches the reference); the stated size (for depthwise, the shortest strip) and it
    takes the scratch path."""
    for seed in range(6):
        graph, feeds = BLOCK_CASES[op](np.random.default_rng([seed, 48]))
        lowered = lower(graph, CONFIG)
        node = next(n for n in lowered.nodes if "scratch_bytes" in n.attrs)  # the sizes below, whatever lower gave
        lowered.nodes = [node]
        lowered.outputs = list(node.outputs)
        lowered.inputs = [i for i in node.inputs if not lowered.tensors[i].is_constant]
        params = dict(zip(node.attrs["param_names"], node.attrs["params"]))
        size = _depthwise_min_scratch(params) if op == "depthwise_conv2d" else params["scratch_bytes"]
        inputs = {**feeds, **run(graph, feeds, table=INT8_IMPLS)}
        want = inputs[node.outputs[0]] if node.outputs[0] in graph.outputs else None
        got_fast, wrote = _run_with_scratch(scratch_lib, lowered, inputs, size)
        got_slow, wrote_short = _run_with_scratch(scratch_lib, lowered, inputs, size - 1)
        assert wrote and not wrote_short
        out = node.outputs[0]
        assert np.array_equal(got_fast[out], got_slow[out])
        if want is not None:
            assert np.array_equal(got_fast[out], want)


@pytest.mark.parametrize("op", sorted(set(GENERATORS) | set(FLOAT_ONLY)))
def test_float_kernels_match_reference(lib, op):
    for seed in range(CASES):
        graph, feeds = {**GENERATORS, **FLOAT_ONLY}[op](np.random.default_rng([seed, 32]), "float32")
        check_case(lib, graph, feeds, seed)


@pytest.mark.parametrize("op", ["quantize", "dequantize"])
def test_quantization_boundaries(lib, op):
    for seed in range(CASES):
        graph, feeds = quantize_case(np.random.default_rng([seed, 1]), op)
        lowered = lower(graph, CONFIG)
        got, want = run_lowered(lib, lowered, feeds, seed)["y"], run(graph, feeds, table=INT8_IMPLS)["y"]
        assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), f"seed {seed}"  # bit-exact, floats too


def test_pointwise_conv_uses_fast_path(lib):
    kernels = set()
    for seed in range(30):
        graph, feeds = conv_case(np.random.default_rng([seed, 8]), "int8", "conv2d")
        kernels.add(check_case(lib, graph, feeds, seed).nodes[0].attrs["kernel"])
    assert kernels == {"kiln_conv2d_s8", "kiln_conv2d_1x1_s8"}


def test_concat_requantizes_through_its_own_kernel(lib):
    kernels = set()
    for seed in range(20):
        graph, feeds = concat_case(np.random.default_rng([seed, 8]), "int8")
        kernels |= {n.attrs["kernel"] for n in check_case(lib, graph, feeds, seed).nodes}
    assert kernels == {"kiln_copy_part", "kiln_requantize_s8"}


# -- the header ------------------------------------------------------------------------
C_TYPES = {"int8": "int8_t", "uint8": "uint8_t", "int32": "int32_t", "float32": "float", "any": "void"}


def parse_header() -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(struct type -> fields, function -> parameter declarations) of kiln_kernels.h."""
    text = re.sub(r"/\*.*?\*/", "", (RUNTIME / "kiln_kernels.h").read_text(), flags=re.S)
    structs = {}
    for body, name in re.findall(r"typedef struct \{(.*?)\} (\w+);", text, flags=re.S):
        fields = []
        for decl in body.split(";"):
            decl = decl.strip()
            if decl:
                assert decl.startswith("int32_t "), f"{name}: non-int32 field {decl!r}"
                fields += [f.strip() for f in decl[len("int32_t "):].split(",")]
        structs[name] = fields
    for old, new in re.findall(r"typedef (\w+) (\w+);", text):
        structs[new] = structs[old]
    funcs = {name: [" ".join(p.split()) for p in params.split(",")] for name, params in re.findall(r"void (\w+)\((.*?)\);", text, flags=re.S)}
    return structs, funcs


def test_header_matches_lowering_abi():
    structs, funcs = parse_header()
    assert sorted(funcs) == sorted(KERNELS), "header and lowering declare different kernels"
    for name, k in KERNELS.items():
        assert structs[k.params_type] == list(k.fields), name
        params = funcs[name]
        assert params[0] == f"const {k.params_type} *p", name
        pointers = [re.sub(r"\s*\w+$", "", p) for p in params[1:]]
        want = [f"const {C_TYPES[t]} *" for t in k.inputs] + [f"{C_TYPES[t]} *" for t in k.outputs] + ["void *"] * k.scratch
        assert pointers == want, name


def test_stubs_compile_strict_c99(tmp_path):
    for opt in ("-O0", "-O2"):
        for src in sorted(STUBS.glob("*.c")):
            subprocess.run(["gcc", *STRICT_FLAGS, opt, f"-I{RUNTIME}", f"-I{STUBS}", "-c", str(src), "-o", str(tmp_path / "k.o")],
                           check=True, capture_output=True, text=True)
    probe = tmp_path / "probe.cc"
    probe.write_text('#include "kiln_kernels.h"\nint main() { return 0; }\n')
    subprocess.run(["g++", "-std=c++11", "-Wall", "-Wextra", "-Werror", "-pedantic", f"-I{RUNTIME}", "-c", str(probe), "-o", str(tmp_path / "p.o")],
                   check=True, capture_output=True, text=True)


def test_kernels_clean_under_address_sanitizer(tmp_path):
    """Re-run the int8 and float sweeps with the library built for ASan+UBSan, in a child process."""
    libasan = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True, check=True).stdout.strip()
    env = {**os.environ, "KILN_STUB_SANITIZE": "address,undefined", "KILN_KERNEL_CASES": "4",
           "LD_PRELOAD": libasan, "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", __file__, "-k", "match_reference or boundaries or scratch"],
                          env=env, capture_output=True, text=True, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


# -- the lower stage beyond single kernels ----------------------------------------------------
def _network(rng) -> Graph:
    """float x -> quantize -> conv -> max_pool -> depthwise -> add -> concat (requantizing) ->
    global_avg_pool -> reshape (alias) -> fully_connected -> softmax -> dequantize."""
    g = Graph("net")

    def tensor(name, shape, quant=None, dtype="int8"):
        return g.add_tensor(act(name, shape, quant, dtype)).name

    def const(name, data, dtype, quant=None):
        return g.add_tensor(Tensor(name, data.shape, dtype, quant=quant, data=data)).name

    def wq(n, axis):
        return QuantParams(tuple(float(s) for s in rng.uniform(0.002, 0.01, n)), (0,) * n, axis)

    def node(name, op, ins, outs, **attrs):
        g.nodes.append(Node(name, op, ins, outs, attrs))

    x = tensor("x", (1, 6, 6, 3), dtype="float32")
    node("q", "quantize", [x], [tensor("xq", (1, 6, 6, 3), q(0.02, 3))], to="int8")
    node("conv", "conv2d", ["xq", const("w1", random_int8(rng, (4, 3, 3, 3)), "int8", wq(4, 0)),
                            const("b1", rng.integers(-500, 500, 4).astype(np.int32), "int32")],
         [tensor("c1", (1, 6, 6, 4), q(0.01, -128))], pads=[1, 1, 1, 1], act_min=0.0, act_max=6.0)
    node("pool", "max_pool2d", ["c1"], [tensor("mp", (1, 3, 3, 4), q(0.01, -128))], window=[2, 2], strides=[2, 2])
    node("dw", "depthwise_conv2d", ["mp", const("w2", random_int8(rng, (1, 3, 3, 4)), "int8", wq(4, 3))],
         [tensor("d", (1, 3, 3, 4), q(0.004, 0))], pads=[1, 1, 1, 1])
    node("add", "add", ["mp", "d"], [tensor("s", (1, 3, 3, 4), q(0.012, -30))])
    node("cat", "concat", ["s", "mp"], [tensor("cat", (1, 3, 3, 8), q(0.012, -30))], axis=3)
    node("gap", "global_avg_pool", ["cat"], [tensor("gap", (1, 1, 1, 8), q(0.012, -30))])
    node("flat", "reshape", ["gap"], [tensor("flat", (1, 8), q(0.012, -30))], shape=[1, 8])
    node("fc", "fully_connected", ["flat", const("w3", random_int8(rng, (5, 8)), "int8", wq(5, 0)),
                                   const("b3", rng.integers(-300, 300, 5).astype(np.int32), "int32")],
         [tensor("logits", (1, 5), q(0.02, 0))])
    node("sm", "softmax", ["logits"], [tensor("p", (1, 5), q(1 / 256, -128))])
    node("dq", "dequantize", ["p"], [tensor("y", (1, 5), dtype="float32")])
    g.inputs, g.outputs = [x], ["y"]
    return g


def test_network_bit_exact_through_serialized_lowered_graph(lib):
    outputs = set()
    for seed in range(6):
        rng = np.random.default_rng([seed, 99])
        g = _network(rng)
        verify(g, levels=("kernel",))
        feeds = {"x": rng.uniform(-1, 1, (1, 6, 6, 3)).astype(np.float32)}
        lowered = loads(dumps(lower(g, CONFIG)))
        assert [n.name for n in lowered.nodes if n.op == "concat"] == ["cat/part0", "cat/part1"]
        assert next(n for n in lowered.nodes if n.op == "reshape").attrs["kernel"] == ""
        assert dumps(lower(g, CONFIG)) == dumps(lower(g, CONFIG)), "lowering is not deterministic"
        got, want = run_lowered(lib, lowered, feeds, seed)["y"], run(g, feeds, table=INT8_IMPLS)["y"]
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
        outputs.add(tuple(want.ravel().tolist()))
    assert len(outputs) == 6  # the network is not degenerate


@pytest.mark.parametrize("dtype", ["int8", "float32"])
def test_higher_ranks_merge_into_four_dimensions(lib, dtype):
    rng = np.random.default_rng(4)
    quant = q(0.1, 3) if dtype == "int8" else None
    x = act("x", (2, 3, 2, 2, 3), quant, dtype)
    cases = [
        ("pad", (2, 4, 2, 2, 5), {"pads": [0, 1, 0, 0, 1, 0, 0, 0, 0, 1], "value": 0.0}),
        ("slice", (1, 2, 2, 2, 3), {"starts": [1, 0, 0, 0, 0], "ends": [2, 3, 2, 2, 3], "steps": [1, 2, 1, 1, 1]}),
        ("transpose", (3, 2, 2, 2, 3), {"perm": [1, 0, 2, 3, 4]}),
        ("add", (2, 3, 2, 2, 3), {}),
    ]
    for op, shape, attrs in cases:
        ins = [x, act("b", (1, 3, 1, 1, 3), quant, dtype)] if op == "add" else [x]
        g = single_node(op, ins, [act("y", shape, quant, dtype)], attrs)
        feeds = {t.name: (random_int8(rng, t.shape) if dtype == "int8" else rng.uniform(-1, 1, t.shape).astype(np.float32)) for t in ins}
        check_case(lib, g, feeds, 0)


def test_identity_transpose_is_an_alias():
    g = single_node("transpose", [act("x", (1, 4, 1, 3), q(0.1, 0))], [act("y", (4, 1, 3, 1), q(0.1, 0))], {"perm": [1, 0, 3, 2]})
    assert lower(g, CONFIG).nodes[0].attrs["kernel"] == ""


def test_unknown_profile_names_the_known_ones():
    g = single_node("reshape", [act("x", (2, 2), q(0.1, 0))], [act("y", (4,), q(0.1, 0))], {"shape": [4]})
    with pytest.raises(KilnError, match="^kernels.profile: unknown profile 'cmsis' \\(known: portable\\)$"):
        lower(g, {"profile": "cmsis"})


BAD_GRAPHS = {
    "zero point 0": single_node("fully_connected", [act("x", (1, 2), q(0.1, 0)), Tensor("w", (1, 2), "int8", quant=QuantParams((0.1,), (4,)), data=np.ones((1, 2)))],
                         [act("y", (1, 1), q(0.1, 0))], {}),
    "scale 1/256": single_node("softmax", [act("x", (1, 3), q(0.1, 0))], [act("y", (1, 3), q(0.1, 0))], {}),
    "entirely in padding": single_node("avg_pool2d", [act("x", (1, 2, 2, 1), q(0.1, 0))], [act("y", (1, 3, 3, 1), q(0.1, 0))],
                                {"window": [1, 1], "strides": [1, 1], "pads": [1, 1, 0, 0]}),
    "keeps its input's parameters": single_node("max_pool2d", [act("x", (1, 2, 2, 1), q(0.1, 0))], [act("y", (1, 1, 1, 1), q(0.2, 0))],
                                         {"window": [2, 2], "strides": [2, 2]}),
    "too large": single_node("mul", [act("a", (2,), q(1.0, 0)), act("b", (2,), q(1.0, 0))], [act("y", (2,), q(1e-10, 0))], {}),
    "no kernel for this op": single_node("Relu", [act("x", (2,), dtype="float32")], [act("y", (2,), dtype="float32")], {}),
}


@pytest.mark.parametrize("reason", sorted(BAD_GRAPHS))
def test_unsupported_patterns_name_the_node(reason):
    g = BAD_GRAPHS[reason]
    with pytest.raises(KilnError, match=rf"node 0 'n' \({g.nodes[0].op}\).*{re.escape(reason)}"):
        lower(g, CONFIG)
