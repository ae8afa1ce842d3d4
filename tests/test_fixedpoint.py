"""Fixed-point numerics against an independent big-integer model of CMSIS-NN / TFLite."""
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_harness import model_activation_range, model_quantize_multiplier, model_requantize, round_half_away as exact_round
from kiln.numerics.fixedpoint import (
    INT32_MAX,
    INT32_MIN,
    activation_range,
    checked_multiplier,
    doubling_high_mult_no_sat,
    float_bits,
    quantize_multiplier,
    requantize,
    round_half_away,
)
from kiln.numerics.lut import build_lut
from kiln.numerics.params import add_params, channel_multipliers, mul_multiplier
from kiln.numerics.softmax import softmax_params

CORNERS = [INT32_MIN, INT32_MIN + 1, -(2**30), -1, 0, 1, 2**30, INT32_MAX - 1, INT32_MAX]
int32s = st.one_of(st.sampled_from(CORNERS), st.integers(INT32_MIN, INT32_MAX))
shifts = st.integers(-31, 31)


@settings(max_examples=3000, deadline=None, derandomize=True, database=None)
@given(val=int32s, mult=int32s, shift=shifts)
def test_requantize_matches_big_integer_model(val, mult, shift):
    assert int(requantize(np.int64(val), mult, shift)) == model_requantize(val, mult, shift)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(vals=st.lists(int32s, min_size=1, max_size=16), data=st.data())
def test_requantize_broadcasts_per_channel(vals, data):
    mults = data.draw(st.lists(int32s, min_size=len(vals), max_size=len(vals)))
    shs = data.draw(st.lists(shifts, min_size=len(vals), max_size=len(vals)))
    got = requantize(np.array(vals, np.int64), np.array(mults), np.array(shs))
    assert got.tolist() == [model_requantize(v, m, s) for v, m, s in zip(vals, mults, shs)]


def test_requantize_corners():
    # the doubling high multiply does not saturate: MIN * MIN wraps to MIN (as CMSIS-NN's _no_sat)
    assert int(doubling_high_mult_no_sat(INT32_MIN, INT32_MIN)) == INT32_MIN
    # round half away from zero on both signs: 3 * 2^30 / 2^31 / 2 = 0.75 -> 1; -0.75 -> -1
    assert int(requantize(3, 2**30, -1)) == 1 and int(requantize(-3, 2**30, -1)) == -1
    # exact halves: 1 * 0.5 -> 0.5 -> 1 ; -1 * 0.5 -> -0.5 -> high mul rounds -0.5 up to 0, then stays 0
    assert int(requantize(1, 2**30, 0)) == 1
    assert int(requantize(-1, 2**30, 0)) == 0
    # the left shift wraps modulo 2^32 like the int32 multiply on the target
    assert int(requantize(2**30, 2**30, 2)) == model_requantize(2**30, 2**30, 2) == 0


@settings(max_examples=1000, deadline=None, derandomize=True, database=None)
@given(real=st.floats(min_value=1e-9, max_value=1e6, allow_nan=False, allow_infinity=False))
def test_quantize_multiplier_matches_exact_rational(real):
    m, s = quantize_multiplier(real)
    assert (m, s) == model_quantize_multiplier(real)
    assert 2**30 <= m < 2**31
    assert abs(Fraction(m) * Fraction(2) ** (s - 31) - Fraction(real)) <= Fraction(2) ** (s - 32)


def test_quantize_multiplier_edge_cases():
    assert quantize_multiplier(0.0) == (0, 0)
    assert quantize_multiplier(1.0) == (2**30, 1)
    assert quantize_multiplier(0.5) == (2**30, 0)
    assert quantize_multiplier(0.75) == (3 * 2**29, 0)
    # rounds up to 2^31: renormalized to 2^30 with one more shift
    assert quantize_multiplier(1.0 - 2.0**-40) == (2**30, 1)
    # shift -31 is kept, anything smaller flushes to zero
    assert quantize_multiplier(2.0**-32) == (2**30, -31)
    assert quantize_multiplier(2.0**-33) == (0, 0)
    for bad in (-0.5, math.nan, math.inf):
        with pytest.raises(ValueError):
            quantize_multiplier(bad)
    with pytest.raises(ValueError, match="too large"):
        checked_multiplier(2.0**31, "test")


def test_round_half_away():
    x = np.array([0.5, -0.5, 1.5, -1.5, 2.5, 0.49999999999999994, -0.49999999999999994, 3.0, -0.0])
    assert round_half_away(x).tolist() == [exact_round(v) for v in x.tolist()]
    f = np.array([0.5, -2.5, 0.49999997], np.float32)
    assert round_half_away(f).dtype == np.float32
    assert round_half_away(f).tolist() == [1.0, -3.0, 0.0]


@pytest.mark.parametrize("lo,hi,scale,zp", [
    (0.0, math.inf, 0.1, -128),      # ReLU, zero point at the bottom
    (0.0, 6.0, 6.0 / 255, -128),     # ReLU6 filling the range
    (0.0, 6.0, 0.01, 127),           # ReLU with zero point at the top: [127, 127]
    (-1.0, 1.0, 0.003, 3),           # ReLU_N1_TO_1 saturating both ends
    (-math.inf, math.inf, 0.5, 0),   # no activation
    (0.0, 6.0, 0.05, -10),
])
def test_activation_range(lo, hi, scale, zp):
    assert activation_range(lo, hi, scale, zp) == model_activation_range(lo, hi, scale, zp)


def test_activation_range_examples():
    assert activation_range(0.0, 6.0, 6.0 / 255, -128) == (-128, 127)
    assert activation_range(0.0, math.inf, 0.1, 7) == (7, 127)
    assert activation_range(0.0, 6.0, 0.01, 127) == (127, 127)


def test_add_params_left_shift_20():
    s_in, s_out = float(np.float32(0.02)), float(np.float32(0.04))
    p = add_params((s_in, -3), (s_in, 5), (s_out, 1))
    # equal input scales: each input multiplier is exactly 0.5
    assert (p.a_mult, p.a_shift, p.b_mult, p.b_shift) == (2**30, 0, 2**30, 0)
    assert (p.a_offset, p.b_offset, p.out_zp, p.left_shift) == (3, -5, 1, 20)
    assert (p.out_mult, p.out_shift) == model_quantize_multiplier(2 * s_in / (2**20 * s_out))
    # unequal: the larger scale sets the common scale
    p = add_params((0.5, 0), (0.125, 0), (1.0, 0))
    assert (p.a_mult, p.a_shift, p.b_mult, p.b_shift) == (2**30, 0, 2**30, -2)


def test_mul_and_channel_multipliers():
    assert mul_multiplier(0.5, 0.25, 0.0625) == (2**30, 2)
    mult, shift = channel_multipliers(0.5, (0.25,), 2.0, 3)  # per-tensor replicated
    assert mult.tolist() == [2**30] * 3 and shift.tolist() == [-3] * 3
    with pytest.raises(ValueError):
        channel_multipliers(0.5, (0.25, 0.5), 2.0, 3)


def test_softmax_params():
    # beta * scale * 2^26 = 2^22: multiplier 2^30, left shift 23, radius floor(31 * 2^26 / 2^23) = 248
    assert softmax_params(1.0, 1.0 / 16) == (2**30, 23, -248)
    mult, shift, diff_min = softmax_params(1.0, 0.1)
    assert (mult, shift) == model_quantize_multiplier(0.1 * 2**26)
    assert diff_min == -math.floor(31 * 2**26 / 2**shift)
    # huge scales are capped at 2^31 - 1
    assert softmax_params(1.0, 1000.0)[:2] == model_quantize_multiplier(2.0**31 - 1)


def test_lut_identity_and_clamp():
    identity = build_lut(lambda x: x, 0.1, -5, 0.1, -5)
    assert identity.tolist() == list(range(-128, 128))
    relu = build_lut(lambda x: np.maximum(x, 0.0), 0.1, 0, 0.05, -128)
    expect = [min(127, max(-128, -128 + exact_round(float(np.float32(max(v, 0) * np.float32(0.1)) * np.float32(1 / np.float32(0.05)))))) for v in range(-128, 128)]
    assert relu.tolist() == expect


def test_float_bits():
    assert float_bits(1.0) == 0x3F800000
    assert float_bits(-math.inf) == -0x800000
    assert float_bits(math.inf) == 0x7F800000
