"""The int8 reference executor against expectations computed independently: scalar Python
integer loops following TFLite's reference kernels, with the big-integer requantization model."""
import math

import numpy as np
import pytest

from kernel_harness import (
    act,
    model_activation_range,
    model_output,
    model_quantize_multiplier,
    model_requantize,
    q,
    random_int8,
    round_half_away,
    single_node,
)
from kiln.errors import KilnError
from kiln.ir.graph import Node, QuantParams, Tensor
from kiln.ir.verify import verify
from kiln.reference.executor import run
from kiln.reference.int8 import INT8_IMPLS

F32 = np.float32


def f32(v: float) -> float:
    return float(np.float32(v))


def run1(op, inputs, outputs, attrs, feeds):
    g = single_node(op, inputs, outputs, attrs)
    verify(g, levels=("kernel",))
    return run(g, feeds, table=INT8_IMPLS)


def weights(name, data, scales, axis):
    return Tensor(name, data.shape, "int8", quant=QuantParams(tuple(scales), (0,) * len(scales), axis), data=data)


def bias(name, data):
    return Tensor(name, data.shape, "int32", data=np.asarray(data, np.int32))


# -- conv / depthwise / fully connected ----------------------------------------------
def naive_conv(x, w, b, x_zp, strides, pads, dil, out_hw, depth_mult=None):
    """acc[n, oy, ox, o] = bias + sum over in-image taps of w * (x - x_zp); OHWI or 1HWC weights."""
    n_, h, wd, c = x.shape
    out_c = w.shape[0] if depth_mult is None else w.shape[3]
    kh, kw = w.shape[1], w.shape[2]
    acc = {}
    for n in range(n_):
        for oy in range(out_hw[0]):
            for ox in range(out_hw[1]):
                for o in range(out_c):
                    total = int(b[o])
                    for ky in range(kh):
                        for kx in range(kw):
                            iy, ix = oy * strides[0] - pads[0] + ky * dil[0], ox * strides[1] - pads[1] + kx * dil[1]
                            if not (0 <= iy < h and 0 <= ix < wd):
                                continue
                            if depth_mult is None:
                                total += sum(int(w[o, ky, kx, ci]) * (int(x[n, iy, ix, ci]) - x_zp) for ci in range(c))
                            else:
                                total += int(w[0, ky, kx, o]) * (int(x[n, iy, ix, o // depth_mult]) - x_zp)
                    acc[n, oy, ox, o] = total
    return acc


def expected_conv(acc, shape, in_s, w_scales, out_s, out_zp, lo, hi):
    y = np.zeros(shape, np.int64)
    for (n, oy, ox, o), total in acc.items():
        real = in_s * w_scales[o if len(w_scales) > 1 else 0] / out_s
        y[n, oy, ox, o] = model_output(total, real, out_zp, lo, hi)
    return y


CONV_CASES = [
    # (in shape, out channels, kernel, strides, pads, dilations, in q, out q, weight scales, act)
    ((1, 6, 7, 3), 5, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), (0.02, -128), (0.05, 127), [0.001, 30.0, 0.0005, 0.003, 0.01], (-math.inf, math.inf)),
    ((2, 7, 6, 5), 3, (3, 2), (2, 2), (0, 1, 2, 0), (2, 1), (0.02, 127), (0.05, -128), [0.007], (0.0, 6.0)),
    ((1, 5, 5, 1), 7, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), (0.1, 3), (0.03, -7), [0.02] * 7, (0.0, math.inf)),
]


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv2d(case):
    shape, oc, (kh, kw), strides, pads, dil, (in_s, in_zp), (out_s, out_zp), w_scales, (amin, amax) = case
    rng = np.random.default_rng(len(w_scales) * 7 + shape[3])
    w_data = random_int8(rng, (oc, kh, kw, shape[3]))
    b_data = rng.integers(-3000, 3000, oc)
    axis = 0 if len(w_scales) > 1 else None
    h = (shape[1] + pads[0] + pads[2] - dil[0] * (kh - 1) - 1) // strides[0] + 1
    wd = (shape[2] + pads[1] + pads[3] - dil[1] * (kw - 1) - 1) // strides[1] + 1
    y_t = act("y", (shape[0], h, wd, oc), q(out_s, out_zp))
    attrs = {"strides": list(strides), "pads": list(pads), "dilations": list(dil), "act_min": amin, "act_max": amax}
    x = random_int8(rng, shape)
    out = run1("conv2d", [act("x", shape, q(in_s, in_zp)), weights("w", w_data, w_scales, axis), bias("b", b_data)], [y_t], attrs, {"x": x})["y"]
    in_s, out_s, w_scales = f32(in_s), f32(out_s), [f32(s) for s in w_scales]
    acc = naive_conv(x, w_data, b_data, in_zp, strides, pads, dil, (h, wd))
    lo, hi = model_activation_range(amin, amax, out_s, out_zp)
    assert np.array_equal(out, expected_conv(acc, y_t.shape, in_s, w_scales, out_s, out_zp, lo, hi))
    assert len(np.unique(out)) > 3  # not degenerate


@pytest.mark.parametrize("mult,channels", [(1, 5), (2, 3), (3, 1)])
def test_depthwise_conv2d(mult, channels):
    rng = np.random.default_rng(mult)
    shape, (kh, kw) = (1, 6, 5, channels), (3, 3)
    oc = channels * mult
    w_scales = [f32(0.004 * (i + 1)) for i in range(oc)]
    w_data = random_int8(rng, (1, kh, kw, oc))
    b_data = rng.integers(-2000, 2000, oc)
    pads, strides, dil = (1, 2, 1, 0), (1, 2), (1, 1)
    y_t = act("y", (1, 6, 3, oc), q(0.07, -20))
    x = random_int8(rng, shape)
    attrs = {"strides": list(strides), "pads": list(pads), "dilations": list(dil), "depth_multiplier": mult, "act_min": -1.0, "act_max": 1.0}
    out = run1("depthwise_conv2d", [act("x", shape, q(0.04, 9)), weights("w", w_data, w_scales, 3), bias("b", b_data)], [y_t], attrs, {"x": x})["y"]
    acc = naive_conv(x, w_data, b_data, 9, strides, pads, dil, (6, 3), depth_mult=mult)
    lo, hi = model_activation_range(-1.0, 1.0, f32(0.07), -20)
    assert np.array_equal(out, expected_conv(acc, y_t.shape, f32(0.04), w_scales, f32(0.07), -20, lo, hi))


def test_fully_connected_per_tensor_weights():
    rng = np.random.default_rng(3)
    w_data = random_int8(rng, (5, 7))
    b_data = rng.integers(-10**6, 10**6, 5)
    x = random_int8(rng, (3, 7))
    out = run1("fully_connected", [act("x", (3, 7), q(0.3, -128)), weights("w", w_data, [0.02], None), bias("b", b_data)],
               [act("y", (3, 5), q(0.5, 127))], {}, {"x": x})["y"]
    real = f32(0.3) * f32(0.02) / f32(0.5)
    expect = [[model_output(int(b_data[o]) + sum(int(w_data[o, i]) * (int(x[r, i]) + 128) for i in range(7)), real, 127)
               for o in range(5)] for r in range(3)]
    assert out.tolist() == expect


def test_conv_rejects_asymmetric_weights():
    w = Tensor("w", (1, 1, 1, 1), "int8", quant=QuantParams((0.1,), (3,), 0), data=np.ones((1, 1, 1, 1), np.int8))
    with pytest.raises(KilnError, match="zero point 0"):
        run1("conv2d", [act("x", (1, 1, 1, 1), q(0.1, 0)), w], [act("y", (1, 1, 1, 1), q(0.1, 0))], {}, {"x": np.zeros((1, 1, 1, 1))})


# -- binary ops ----------------------------------------------------------------------------
def expected_add(a, b, qa, qb, qy, sub, lo, hi):
    sa, sb, sy = f32(qa[0]), f32(qb[0]), f32(qy[0])
    twice = 2 * max(sa, sb)
    out = np.zeros(np.broadcast_shapes(a.shape, b.shape), np.int64)
    for idx in np.ndindex(out.shape):
        av = int(a[tuple(i if d > 1 else 0 for i, d in zip(idx[-a.ndim:], a.shape))])
        bv = int(b[tuple(i if d > 1 else 0 for i, d in zip(idx[-b.ndim:], b.shape))])
        ra = model_requantize((av - qa[1]) * 2**20, *model_quantize_multiplier(sa / twice))
        rb = model_requantize((bv - qb[1]) * 2**20, *model_quantize_multiplier(sb / twice))
        out[idx] = model_output(ra - rb if sub else ra + rb, twice / (2**20 * sy), qy[1], lo, hi)
    return out


@pytest.mark.parametrize("op", ["add", "sub"])
@pytest.mark.parametrize("shapes", [((1, 3, 4, 5), (1, 1, 4, 1)), ((2, 3), (2, 3)), ((4, 1, 3), (5, 1))])
def test_add_sub_broadcast(op, shapes):
    rng = np.random.default_rng(11)
    qa, qb, qy = (0.05, -128), (0.11, 127), (0.09, 4)
    a, b = random_int8(rng, shapes[0]), random_int8(rng, shapes[1])
    out_shape = np.broadcast_shapes(*shapes)
    out = run1(op, [act("a", shapes[0], q(*qa)), act("b", shapes[1], q(*qb))], [act("y", out_shape, q(*qy))],
               {"act_min": 0.0, "act_max": math.inf}, {"a": a, "b": b})["y"]
    lo, hi = model_activation_range(0.0, math.inf, f32(qy[0]), qy[1])
    assert np.array_equal(out, expected_add(a, b, qa, qb, qy, op == "sub", lo, hi))


def test_mul_broadcast_saturates():
    rng = np.random.default_rng(5)
    a, b = random_int8(rng, (2, 3, 4)), random_int8(rng, (3, 1))
    qa, qb, qy = (0.1, 10), (0.2, -128), (0.05, 0)
    out = run1("mul", [act("a", a.shape, q(*qa)), act("b", b.shape, q(*qb))], [act("y", (2, 3, 4), q(*qy))], {}, {"a": a, "b": b})["y"]
    real = f32(0.1) * f32(0.2) / f32(0.05)
    expect = np.array([[[model_output((int(a[i, j, k]) - 10) * (int(b[j, 0]) + 128), real, 0) for k in range(4)] for j in range(3)] for i in range(2)])
    assert np.array_equal(out, expect)
    assert (out == 127).any() and (out == -128).any()


# -- pooling -------------------------------------------------------------------------------------
def test_avg_pool_rounds_half_away_and_excludes_padding():
    x = np.array([[-3, -1, 5], [1, 2, 0], [7, -8, 4]], np.int8).reshape(1, 3, 3, 1)
    qp = q(0.1, -5)
    out = run1("avg_pool2d", [act("x", x.shape, qp)], [act("y", (1, 2, 2, 1), qp)],
               {"window": [2, 2], "strides": [2, 2], "pads": [1, 1, 0, 0]}, {"x": x})["y"]
    # windows: {-3} ; {-1, 5} ; {1, 7} ; {2, 0, -8, 4}
    assert out.ravel().tolist() == [-3, 2, 4, round_half_away(-2 / 4)]
    x2 = np.array([-3, 0], np.int8).reshape(1, 1, 2, 1)  # mean -1.5 rounds away to -2
    out2 = run1("avg_pool2d", [act("x", x2.shape, qp)], [act("y", (1, 1, 1, 1), qp)], {"window": [1, 2], "strides": [1, 1]}, {"x": x2})["y"]
    assert out2.ravel().tolist() == [-2]


def test_max_pool_clamps_to_activation():
    rng = np.random.default_rng(2)
    x = random_int8(rng, (1, 5, 5, 3))
    qp = q(0.05, -20)
    out = run1("max_pool2d", [act("x", x.shape, qp)], [act("y", (1, 3, 3, 3), qp)],
               {"window": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "act_min": 0.0, "act_max": 2.0}, {"x": x})["y"]
    lo, hi = model_activation_range(0.0, 2.0, f32(0.05), -20)
    for oy in range(3):
        for ox in range(3):
            for c in range(3):
                win = [int(x[0, iy, ix, c]) for iy in range(2 * oy - 1, 2 * oy + 2) for ix in range(2 * ox - 1, 2 * ox + 2) if 0 <= iy < 5 and 0 <= ix < 5]
                assert out[0, oy, ox, c] == min(max(max(win), lo), hi)


def test_global_avg_pool_requantizes_its_mean():
    """TFLite's MEAN: the sum of x - input_zp times in_scale / (out_scale * count), that 1/count folded into
    the multiplier (here 0.2 / (0.05 * 4) = 1: an exact mean on the output's grid, rounded half away from zero)."""
    x = np.array([5, -6, 7, 1, -128, -128, 127, 127], np.int8).reshape(1, 2, 2, 2)
    out = run1("global_avg_pool", [act("x", x.shape, q(0.2, 3))], [act("y", (1, 1, 1, 2), q(0.05, -7))], {}, {"x": x})["y"]
    sums = [5 + 7 - 128 + 127 - 4 * 3, -6 + 1 - 128 + 127 - 4 * 3]
    assert out.ravel().tolist() == [s - 7 for s in sums]
    same = run1("global_avg_pool", [act("x", x.shape, q(0.2, 0))], [act("y", (1, 1, 1, 2), q(0.2, 0))], {}, {"x": x})["y"]
    assert same.ravel().tolist() == [round_half_away((5 + 7 - 128 + 127) / 4), round_half_away((-6 + 1 - 128 + 127) / 4)]


# -- softmax -------------------------------------------------------------------------------------
def _mul_sat(a: int, b: int) -> int:
    if a == b == -(2**31):
        return 2**31 - 1
    total = a * b + (1 - 2**30 if (a < 0) != (b < 0) else 2**30)
    quotient = abs(total) >> 31  # C division truncates toward zero
    return quotient if total >= 0 else -quotient


def _div_pow2(x: int, e: int) -> int:
    if e == 0:
        return x
    qt, r = divmod(x, 2**e)
    half = 2 ** (e - 1)
    return qt + 1 if r > half or (r == half and x >= 0) else qt


def _sat_shl(x: int, e: int) -> int:
    return max(min(x * 2**e, 2**31 - 1), -(2**31))


def _exp_on_negative(val: int) -> int:
    if val == 0:
        return 2**31 - 1
    mod = (val % 2**24) - 2**24
    rem = mod - val
    x = mod * 32 + 2**28
    x2 = _mul_sat(x, x)
    poly = _div_pow2(_mul_sat(_div_pow2(_mul_sat(x2, x2), 2) + _mul_sat(x2, x), 715827883) + x2, 1)
    result = 1895147668 + _mul_sat(1895147668, x + poly)
    for bit, factor in zip(range(24, 31), (1672461947, 1302514674, 790015084, 290630308, 39332535, 720401, 242)):
        if rem & (1 << bit):
            result = _mul_sat(result, factor)
    return result


def _one_over_one_plus(val: int) -> int:
    half = (val + 2**31 - 1 + 1) // 2
    x = 1515870810 + _mul_sat(half, -1010580540)
    for _ in range(3):
        x += _sat_shl(_mul_sat(x, 2**29 - _mul_sat(half, x)), 2)
    return _sat_shl(x, 1)


def scalar_softmax(row: list[int], in_scale: float) -> list[int]:
    """arm_softmax_s8 transliterated to Python ints, one row."""
    mult, shift = model_quantize_multiplier(min(f32(in_scale) * 2.0**26, 2.0**31 - 1))
    diff_min = -math.floor(31 * 2**26 / 2**shift)
    top = max(row)
    exps = [_exp_on_negative(_mul_sat((v - top) * 2**shift, mult)) if v - top >= diff_min else None for v in row]
    total = sum(_div_pow2(e, 12) for e in exps if e is not None)
    headroom = 32 - total.bit_length()
    scale = _one_over_one_plus((total << headroom) - 2**31)
    bits = 12 - headroom + 23
    return [-128 if e is None else min(max(_div_pow2(_mul_sat(scale, e), bits) - 128, -128), 127) for e in exps]


@pytest.mark.parametrize("in_scale,zp", [(0.1, -128), (0.5, 127), (0.02, 0), (4.0, 3)])
def test_softmax_bit_exact_and_close_to_float(in_scale, zp):
    rng = np.random.default_rng(int(in_scale * 100))
    x = random_int8(rng, (3, 2, 9))
    x[0, 0] = 7  # a uniform row
    out = run1("softmax", [act("x", x.shape, q(in_scale, zp))], [act("y", x.shape, q(1 / 256, -128))], {"beta": 1.0}, {"x": x})["y"]
    for idx in np.ndindex(x.shape[:-1]):
        assert out[idx].tolist() == scalar_softmax([int(v) for v in x[idx]], in_scale)
    real = (x.astype(np.float64) - zp) * f32(in_scale)
    probs = np.exp(real - real.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    assert np.abs((out.astype(np.float64) + 128) / 256 - probs).max() <= 2.5 / 256


def test_softmax_requires_fixed_output_params():
    with pytest.raises(KilnError, match="1/256"):
        run1("softmax", [act("x", (1, 4), q(0.1, 0))], [act("y", (1, 4), q(0.1, 0))], {}, {"x": np.zeros((1, 4), np.int8)})


# -- table-driven elementwise ops -----------------------------------------------------------------
def _sigmoid(v):
    return 0.5 * (1 + math.tanh(v / 2))


ELEMENTWISE = {
    "sigmoid": ({}, _sigmoid),
    "tanh": ({}, math.tanh),
    "hardswish": ({}, lambda v: v * min(max(v + 3, 0), 6) / 6),
    "hardsigmoid": ({"alpha": 0.2, "beta": 0.5}, lambda v: min(max(0.2 * v + 0.5, 0), 1)),
    "silu": ({}, lambda v: v * _sigmoid(v)),
    "gelu": ({"approximate": "none"}, lambda v: v * 0.5 * math.erfc(-v / math.sqrt(2))),
    "leaky_relu": ({"alpha": 0.1}, lambda v: max(v, 0.1 * v)),
    "clamp": ({"act_min": -0.5, "act_max": 1.25}, lambda v: min(max(v, -0.5), 1.25)),
    "lrn_scale": ({"bias": 2.0, "alpha_over_size": 0.25, "beta": 0.75}, lambda v: (2.0 + 0.25 * v) ** -0.75),
}


@pytest.mark.parametrize("op", sorted(ELEMENTWISE))
def test_elementwise_tables(op):
    attrs, fn = ELEMENTWISE[op]
    (in_s, in_zp), (out_s, out_zp) = (0.045, -3), (0.0123, 17)
    x = np.arange(-128, 128, dtype=np.int8).reshape(2, 128)
    out = run1(op, [act("x", x.shape, q(in_s, in_zp))], [act("y", x.shape, q(out_s, out_zp))], attrs, {"x": x})["y"]
    assert out.ravel().tolist() == _expected_table(op, attrs, fn, (in_s, in_zp), (out_s, out_zp))


def _expected_table(op, attrs, fn, inp, outp) -> list[int]:
    """As TFLite's LUTPopulate (float32 throughout); a clamp is the rescaled identity clamped to bounds
    computed as CalculateActivationRangeQuantized does (the bound divided by the scale, ties away from zero)."""
    (in_s, in_zp), (out_s, out_zp) = inp, outp
    inverse = F32(1) / F32(out_s)
    lo, hi = -128, 127
    if op == "clamp":
        fn = float
        lo = max(lo, out_zp + round_half_away(float(F32(attrs["act_min"]) / F32(out_s))))
        hi = min(hi, out_zp + round_half_away(float(F32(attrs["act_max"]) / F32(out_s))))
    expect = []
    for v in range(-128, 128):
        deq = F32(in_s) * F32(v - in_zp)
        rescaled = round_half_away(float(F32(fn(float(deq))) * inverse))
        expect.append(min(max(rescaled + out_zp, lo), hi))
    return expect


def test_clamp_bounds_on_half_steps_round_as_fused_activations():
    """A bound exactly between two output levels rounds away from zero, as TFLite's activation range does."""
    attrs = {"act_min": -0.375, "act_max": 0.625}  # -1.5 and 2.5 output steps of 0.25
    x = np.arange(-128, 128, dtype=np.int8).reshape(2, 128)
    out = run1("clamp", [act("x", x.shape, q(0.0625, 0))], [act("y", x.shape, q(0.25, 0))], attrs, {"x": x})["y"]
    assert out.min() == -2 and out.max() == 3
    assert out.ravel().tolist() == _expected_table("clamp", attrs, None, (0.0625, 0), (0.25, 0))


# -- quantization boundaries and float islands ------------------------------------------------------
def test_quantize_rounds_half_away_and_saturates():
    x = np.array([0.25, -0.25, 0.75, -0.75, 1e9, -1e9, 63.0, -64.5], np.float32)
    out = run1("quantize", [act("x", (8,), dtype="float32")], [act("y", (8,), q(0.5, -1))], {"to": "int8"}, {"x": x})["y"]
    assert out.tolist() == [min(max(round_half_away(float(F32(v) / F32(0.5))) - 1, -128), 127) for v in x]
    assert out.tolist() == [0, -2, 1, -3, 127, -128, 125, -128]


def test_float_island_between_int8_tensors():
    g = single_node("dequantize", [act("x", (1, 6), q(0.1, 2))], [act("f", (1, 6), dtype="float32")])
    g.add_tensor(act("s", (1, 6), dtype="float32"))
    g.add_tensor(act("y", (1, 6), q(1 / 128, 0)))
    g.nodes += [Node("tanh", "tanh", ["f"], ["s"]), Node("q", "quantize", ["s"], ["y"], {"to": "int8"})]
    g.outputs = ["y"]
    verify(g, levels=("kernel",))
    x = np.array([[-128, -3, 2, 3, 17, 127]], np.int8)
    out = run(g, {"x": x}, table=INT8_IMPLS)["y"]
    deq = [float(F32(f32(0.1)) * F32(int(v) - 2)) for v in x.ravel()]
    assert out.ravel().tolist() == [min(max(round_half_away(float(F32(math.tanh(d)) / F32(1 / 128))), -128), 127) for d in deq]


# -- data movement ----------------------------------------------------------------------------------------
def test_concat_requantizes_differing_inputs():
    a = np.array([[-128, 0, 127]], np.int8)
    b = np.array([[-128, -1, 5, 127]], np.int8)
    out = run1("concat", [act("a", (1, 3), q(0.1, 0)), act("b", (1, 4), q(0.3, -7))], [act("y", (1, 7), q(0.1, 0))],
               {"axis": 1}, {"a": a, "b": b})["y"]
    expect_b = [model_output(int(v) + 7, f32(0.3) / f32(0.1), 0) for v in b.ravel()]
    assert out.ravel().tolist() == [-128, 0, 127] + expect_b


def test_split_slice_transpose_pad_resize():
    rng = np.random.default_rng(9)
    x = random_int8(rng, (1, 4, 5, 3))
    qp = q(0.25, -9)
    parts = single_node("split", [act("x", x.shape, qp)], [act("p0", (1, 4, 2, 3), qp), act("p1", (1, 4, 3, 3), q(0.5, 0))], {"axis": 2, "sizes": [2, 3]})
    res = run(parts, {"x": x}, table=INT8_IMPLS)
    assert np.array_equal(res["p0"], x[:, :, :2])
    assert res["p1"].tolist() == np.vectorize(lambda v: model_output(int(v) + 9, 0.5, 0))(x[:, :, 2:]).tolist()
    out = run1("slice", [act("x", x.shape, qp)], [act("y", (1, 2, 2, 3), qp)], {"starts": [0, 3, 1, 0], "ends": [1, -1, 5, 3], "steps": [1, -2, 2, 1]}, {"x": x})["y"]
    assert out.tolist() == [[[[int(x[0, r, c, k]) for k in range(3)] for c in (1, 3)] for r in (3, 1)]]
    out = run1("transpose", [act("x", x.shape, qp)], [act("y", (1, 3, 4, 5), qp)], {"perm": [0, 3, 1, 2]}, {"x": x})["y"]
    assert all(out[0, c, h, w] == x[0, h, w, c] for c in range(3) for h in range(4) for w in range(5))
    out = run1("pad", [act("x", x.shape, qp)], [act("y", (1, 5, 7, 3), qp)], {"pads": [0, 1, 0, 0, 0, 0, 2, 0], "value": 0.0}, {"x": x})["y"]
    assert (out[:, 0] == -9).all() and (out[:, :, 5:] == -9).all() and np.array_equal(out[:, 1:, :5], x)
    out = run1("resize_nearest", [act("x", x.shape, qp)], [act("y", (1, 3, 2, 3), qp)], {"rows": [0, 0, 3], "cols": [4, 1]}, {"x": x})["y"]
    assert out.tolist() == [[[[int(x[0, r, c, k]) for k in range(3)] for c in (4, 1)] for r in (0, 0, 3)]]


def test_reshape_keeps_values_and_checks_params():
    x = np.arange(-6, 6, dtype=np.int8).reshape(1, 2, 2, 3)
    out = run1("reshape", [act("x", x.shape, q(0.1, 1))], [act("y", (4, 3), q(0.1, 1))], {"shape": [4, 3]}, {"x": x})["y"]
    assert out.ravel().tolist() == list(range(-6, 6))
    with pytest.raises(KilnError, match="reshape"):
        run1("reshape", [act("x", x.shape, q(0.1, 1))], [act("y", (4, 3), q(0.2, 1))], {"shape": [4, 3]}, {"x": x})


# -- layer norm (no TFLite builtin: held to the exact result instead) -----------------------------
@pytest.mark.parametrize("seed", range(4))
def test_layer_norm_is_the_exact_result_rounded_once(seed):
    """The integer layer norm against the exact one of the dequantized input, in fractions: at most one
    output step off, and only where the exact value lies within a hair of a half-step (its only roundings
    are the epsilon term's, the normalized value's 2^-16 and the weights' 30 bits)."""
    from fractions import Fraction

    rng = np.random.default_rng([seed, 5])
    rows, size = 6, int(rng.choice([3, 16, 40, 300]))
    in_q, out_q = q(float(rng.uniform(0.01, 0.1)), int(rng.integers(-20, 20))), q(float(rng.uniform(0.01, 0.05)), int(rng.integers(-10, 10)))
    gamma = (rng.normal(1.0, 0.5, size) * rng.choice([1, -1], size)).astype(np.float32)
    beta = rng.normal(0.0, 0.3, size).astype(np.float32)
    eps = 1e-5
    x = random_int8(rng, (rows, size))
    g = single_node("layer_norm", [act("x", (rows, size), in_q), Tensor("gamma", (size,), "float32", data=gamma),
                                   Tensor("beta", (size,), "float32", data=beta)], [act("y", (rows, size), out_q)], {"epsilon": eps})
    got = run(g, {"x": x}, table=INT8_IMPLS)["y"].astype(np.int64)
    s_x, s_y = Fraction(float(in_q.scale[0])), Fraction(float(out_q.scale[0]))
    near = 0
    for r in range(rows):
        real = [s_x * (int(v) - in_q.zero_point[0]) for v in x[r]]
        mean = sum(real) / size
        var = sum((v - mean) ** 2 for v in real) / size + Fraction(eps)
        inv = 1 / math.sqrt(var)
        for i in range(size):
            exact = float((real[i] - mean) * Fraction(inv) * Fraction(float(gamma[i])) + Fraction(float(beta[i]))) / float(s_y) + out_q.zero_point[0]
            want = min(max(math.floor(exact + 0.5), -128), 127)
            if got[r, i] != want:
                assert abs(got[r, i] - want) == 1 and abs(exact - math.floor(exact) - 0.5) < 1e-3, (r, i, got[r, i], exact)
                near += 1
    assert near <= rows * size // 50
