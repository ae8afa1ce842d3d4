"""int8 softmax as CMSIS-NN's `arm_softmax_s8` computes it, and its parameters as TFLite derives them.

The input differences from the row maximum are scaled into Q5.26
(`PreprocessSoftmaxScaling` with 5 integer bits), exponentiated with the
gemmlowp fixed-point `exp_on_negative_values`, summed with 12 accumulation
bits, and divided via `one_over_one_plus_x_for_x_in_0_1`. The output has
scale 1/256 and zero point −128.
"""
from __future__ import annotations

import math

import numpy as np

from kiln.numerics.fixedpoint import INT32_MAX, INT32_MIN, divide_by_power_of_two, quantize_multiplier

SCALED_DIFF_INTEGER_BITS = 5
ACCUM_BITS = 12
OUTPUT_SCALE = 1.0 / 256.0
OUTPUT_ZERO_POINT = -128
MAX_ROW_SIZE = (1 << ACCUM_BITS) - 1  # the int32 sum of 2^(31-12)-sized terms must not overflow


def softmax_params(beta: float, input_scale: float) -> tuple[int, int, int]:
    """(multiplier, left shift, diff_min) as TFLite's `PreprocessSoftmaxScaling` and `CalculateInputRadius`."""
    real = min(float(np.float32(beta)) * input_scale * float(1 << (31 - SCALED_DIFF_INTEGER_BITS)), 2.0**31 - 1.0)
    if not real > 1.0:
        raise ValueError(f"softmax input scale {input_scale:.6g} x beta {beta:.6g} is too small")
    mult, shift = quantize_multiplier(real)
    radius = ((1 << SCALED_DIFF_INTEGER_BITS) - 1) * float(1 << (31 - SCALED_DIFF_INTEGER_BITS)) / float(1 << shift)
    return mult, shift, -int(math.floor(radius))


def mul_sat(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    """CMSIS-NN `arm_nn_doubling_high_mult`: rounded (a·b)/2^31 toward zero, saturating MIN·MIN."""
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    nudge = np.where((a < 0) ^ (b < 0), 1 - (1 << 30), 1 << 30)
    total = a * b + nudge
    result = np.where(total >= 0, total >> 31, -((-total) >> 31))
    return np.where((a == b) & (a == INT32_MIN), INT32_MAX, result)


def mul_pow2_sat(x: np.ndarray, exponent: int) -> np.ndarray:
    """CMSIS-NN `arm_nn_mult_by_power_of_two`: x·2^exponent saturated to int32."""
    x = np.asarray(x, np.int64)
    thresh = (1 << (31 - exponent)) - 1
    return np.where(x > thresh, INT32_MAX, np.where(x < -thresh, INT32_MIN, x << exponent))


_EXP_FACTORS = (1672461947, 1302514674, 790015084, 290630308, 39332535, 720401, 242)


def exp_on_negative_values(val: np.ndarray) -> np.ndarray:
    """CMSIS-NN `arm_nn_exp_on_negative_values`: exp of a Q5.26 value ≤ 0, as Q0.31."""
    val = np.asarray(val, np.int64)
    mod_minus_quarter = (val & ((1 << 24) - 1)) - (1 << 24)
    remainder = mod_minus_quarter - val
    x = mod_minus_quarter * 32 + (1 << 28)
    x2 = mul_sat(x, x)
    poly = divide_by_power_of_two(mul_sat(divide_by_power_of_two(mul_sat(x2, x2), 2) + mul_sat(x2, x), 715827883) + x2, 1)
    result = 1895147668 + mul_sat(1895147668, x + poly)
    for bit, factor in enumerate(_EXP_FACTORS, start=24):
        result = np.where(remainder & (1 << bit), mul_sat(result, factor), result)
    return np.where(val == 0, INT32_MAX, result)


def one_over_one_plus_x(val: np.ndarray) -> np.ndarray:
    """CMSIS-NN `arm_nn_one_over_one_plus_x_for_x_in_0_1`: 1/(1+x) for Q0.31 x in [0, 1), as Q1.30 doubled."""
    total = np.asarray(val, np.int64) + INT32_MAX
    half_denominator = np.where(total >= 0, (total + 1) // 2, -((-(total - 1)) // 2))
    x = 1515870810 + mul_sat(half_denominator, -1010580540)
    for _ in range(3):
        x = x + mul_pow2_sat(mul_sat(x, (1 << 29) - mul_sat(half_denominator, x)), 2)
    return mul_pow2_sat(x, 1)


def _bit_length(v: np.ndarray) -> np.ndarray:
    length = np.zeros(v.shape, np.int64)
    for b in range(63):
        length += (v >> b) > 0
    return length


def softmax_s8(x: np.ndarray, mult: int, shift: int, diff_min: int) -> np.ndarray:
    """Softmax over the last axis of an int8 array, bit-exact with `arm_softmax_s8`."""
    x = np.asarray(x, np.int64)
    if x.shape[-1] > MAX_ROW_SIZE:
        raise ValueError(f"int8 softmax over {x.shape[-1]} values: at most {MAX_ROW_SIZE}")
    diff = x - x.max(axis=-1, keepdims=True)
    valid = diff >= diff_min
    exp = exp_on_negative_values(mul_sat(np.where(valid, diff, 0) * (1 << shift), mult))
    total = np.where(valid, divide_by_power_of_two(exp, ACCUM_BITS), 0).sum(axis=-1, keepdims=True)
    headroom = 32 - _bit_length(total)
    shifted_scale = one_over_one_plus_x((total << headroom) - (1 << 31))
    bits_over_unit = ACCUM_BITS - headroom + 23
    res = divide_by_power_of_two(mul_sat(shifted_scale, exp), bits_over_unit) - 128
    return np.where(valid, np.clip(res, -128, 127), -128).astype(np.int8)
