"""TFLite Micro's int8 arithmetic for ops Kiln otherwise computes its own way, as 256-entry tables.

Kiln tables its int8 elementwise ops from the real function, rounded once (`lut.py`). A model
that arrives as a quantized `.tflite` file must instead give what TFLite Micro's reference
kernels give, bit for bit, so for those files the TFLite frontend tables TFLM's own integer
algorithm at every int8 input: LOGISTIC and TANH (gemmlowp's fixed-point `logistic`/`tanh`
behind an input-radius saturation), HARD_SWISH (the int16 multiplier chain), LEAKY_RELU, RELU
and int8→int8 QUANTIZE (`MultiplyByQuantizedMultiplier` with TFLM's multipliers), RELU6 (a
clamp of the raw input to bounds on the input's scale). Each function follows the kernel's
Prepare (how the multipliers are formed, float32 or double) and Eval; tests hold every table
to the TFLM interpreter at all 256 inputs. (TFLM's MEAN, which folds 1/count into its
multiplier, is `params.mean_multiplier`.)

Arrays are int64 holding int32 (or int16) values, wrapped or saturated where C would.
"""
from __future__ import annotations

import math

import numpy as np

from kiln.numerics.fixedpoint import INT8_MAX, INT8_MIN, divide_by_power_of_two, round_half_away, wrap_int32

I32_MIN, I32_MAX = -(2**31), 2**31 - 1
INT8_INPUTS = np.arange(INT8_MIN, INT8_MAX + 1, dtype=np.int64)


def quantize_multiplier(real: float) -> tuple[int, int]:
    """TFLite's `QuantizeMultiplier`, negative multipliers included (LEAKY_RELU's alpha may be)."""
    if real == 0.0:
        return 0, 0
    significand, shift = math.frexp(real)
    q = int(round_half_away(significand * 2.0**31))
    if abs(q) == 2**31:
        q //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return q, shift


def _high_mul(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    """gemmlowp `SaturatingRoundingDoublingHighMul` on int32 values (C division truncates)."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    ab = a * b
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    total = ab + nudge
    q = np.where(total >= 0, total >> 31, -((-total) >> 31))
    return np.where((a == b) & (a == I32_MIN), I32_MAX, q)


def multiply_by_quantized_multiplier(x: np.ndarray, multiplier: int, shift: int) -> np.ndarray:
    """TFLite's reference `MultiplyByQuantizedMultiplier` (the left shift wraps as int32)."""
    left, right = max(shift, 0), max(-shift, 0)
    return divide_by_power_of_two(_high_mul(wrap_int32(np.asarray(x, np.int64) << left), multiplier), right)


def _pot(x: np.ndarray, exponent: int) -> np.ndarray:
    """gemmlowp `SaturatingRoundingMultiplyByPOT` on int32 values."""
    if exponent < 0:
        return divide_by_power_of_two(x, -exponent)
    if exponent == 0:
        return x
    threshold = (1 << (31 - exponent)) - 1
    return np.where(x > threshold, I32_MAX, np.where(x < -threshold, I32_MIN, x << exponent))


def _exp_quarter(a: np.ndarray) -> np.ndarray:
    """gemmlowp `exp_on_interval_between_negative_one_quarter_and_0_excl` (Q0.31)."""
    constant_term, one_third = 1895147668, 715827883
    x = a + (1 << 28)
    x2 = _high_mul(x, x)
    x3 = _high_mul(x2, x)
    x4 = _high_mul(x2, x2)
    x4_over_4 = _pot(x4, -2)
    poly = _pot(_high_mul(x4_over_4 + x3, one_third) + x2, -1)
    return constant_term + _high_mul(constant_term, x + poly)


def _exp_on_negative_values(a: np.ndarray, integer_bits: int) -> np.ndarray:
    """gemmlowp `exp_on_negative_values` of a Q(integer_bits) value, as Q0.31."""
    fractional = 31 - integer_bits
    quarter = 1 << (fractional - 2)
    mod = (a & (quarter - 1)) - quarter
    result = _exp_quarter(_pot(mod, integer_bits))
    remainder = mod - a
    for exponent, multiplier in ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535), (3, 720401), (4, 242)):
        if integer_bits > exponent:
            result = np.where(remainder & (1 << (fractional + exponent)), _high_mul(result, multiplier), result)
    if integer_bits > 5:
        result = np.where(a < -(1 << (36 - integer_bits)), 0, result)
    return np.where(a == 0, I32_MAX, result)


def _newton_reciprocal(a: np.ndarray) -> np.ndarray:
    """The Q2.29 Newton-Raphson estimate of 1 / ((1 + a) / 2) that gemmlowp's two divisions share."""
    half_denominator = _rounding_half_sum(a, I32_MAX)
    x = 1515870810 + _high_mul(half_denominator, -1010580540)
    for _ in range(3):
        one_minus = (1 << 29) - _high_mul(half_denominator, x)
        x = x + _pot(_high_mul(x, one_minus), 2)
    return x


def _rounding_half_sum(a: np.ndarray, b: int) -> np.ndarray:
    total = np.asarray(a, np.int64) + b
    t = total + np.where(total >= 0, 1, -1)
    return np.where(t >= 0, t // 2, -((-t) // 2))


def _logistic(a: np.ndarray, integer_bits: int) -> np.ndarray:
    """gemmlowp `logistic` of a Q(integer_bits) value, as Q0.31."""
    positive = a > 0
    abs_input = np.where(positive, a, -a)
    result_if_positive = _pot(_newton_reciprocal(_exp_on_negative_values(-abs_input, integer_bits)), 1)
    result = np.where(positive, result_if_positive, I32_MAX - result_if_positive)
    return np.where(a == 0, 1 << 30, result)


def _tanh(a: np.ndarray, integer_bits: int) -> np.ndarray:
    """gemmlowp `tanh` of a Q(integer_bits) value, as Q0.31."""
    negative = a < 0
    n = np.where(negative, a, -a)
    t = _pot(_newton_reciprocal(_exp_on_negative_values(n, integer_bits + 1)) - (1 << 29), 2)
    return np.where(a == 0, 0, np.where(negative, -t, t))


def _input_rescaling(in_scale: float) -> tuple[int, int, int]:
    """(multiplier, left shift, input radius) of TFLM's int8 LOGISTIC/TANH Prepare (4 integer bits)."""
    significand, shift = math.frexp(float(np.float32(in_scale)) * float(1 << 27))
    multiplier = int(round_half_away(significand * 2.0**31))
    radius = math.floor(15.0 * (1 << 27) / 2.0**shift)
    return multiplier, shift, radius


def _saturating_table(in_zp: int, radius: int, body) -> np.ndarray:
    x = INT8_INPUTS - in_zp
    inside = np.abs(x) < radius
    values = body(np.where(inside, x, 0))
    return np.where(x <= -radius, INT8_MIN, np.where(x >= radius, INT8_MAX, values)).astype(np.int8)


def logistic_table(in_scale: float, in_zp: int) -> np.ndarray:
    """TFLM int8 LOGISTIC at every input (output scale 1/256, zero point −128)."""
    multiplier, shift, radius = _input_rescaling(in_scale)

    def body(x: np.ndarray) -> np.ndarray:
        q4 = multiply_by_quantized_multiplier(x, multiplier, shift)
        out = divide_by_power_of_two(_logistic(q4, 4), 23) - 128
        return np.clip(out, INT8_MIN, INT8_MAX)

    return _saturating_table(in_zp, radius, body)


def tanh_table(in_scale: float, in_zp: int) -> np.ndarray:
    """TFLM int8 TANH at every input (output scale 1/128, zero point 0)."""
    multiplier, shift, radius = _input_rescaling(in_scale)

    def body(x: np.ndarray) -> np.ndarray:
        q4 = multiply_by_quantized_multiplier(x, multiplier, shift)
        return np.clip(divide_by_power_of_two(_tanh(q4, 4), 24), INT8_MIN, INT8_MAX)

    return _saturating_table(in_zp, radius, body)


def _f32(v: float) -> np.float32:
    return np.float32(v)


def byte_values(dtype: str) -> np.ndarray:
    """The value of each table entry's input byte: entry i is byte i ^ 0x80 (int8: i − 128; uint8: (i + 128) mod 256)."""
    return INT8_INPUTS if dtype == "int8" else (INT8_INPUTS + 256) % 256


def as_table(values: np.ndarray, dtype: str) -> np.ndarray:
    """Output values (int8 or uint8) saturated to their type, stored as the int8 bytes a table holds."""
    lo, hi = (INT8_MIN, INT8_MAX) if dtype == "int8" else (0, 255)
    return np.clip(values, lo, hi).astype(np.uint8 if dtype == "uint8" else np.int8).view(np.int8)


def requantize_table(in_scale: float, in_zp: int, out_scale: float, out_zp: int, in_dtype: str = "int8", out_dtype: str = "int8") -> np.ndarray:
    """TFLM QUANTIZE between int8 and uint8 (`Requantize`): multiplier in_scale/out_scale formed in double."""
    multiplier, shift = quantize_multiplier(float(_f32(in_scale)) / float(_f32(out_scale)))
    out = multiply_by_quantized_multiplier(byte_values(in_dtype) - in_zp, multiplier, shift) + out_zp
    return as_table(out, out_dtype)


def _quantize_float(value: float, scale: float, zero_point: int) -> int:
    """`zero_point + round(value / scale)` with float32 division, as TFLM's Prepare functions form bounds."""
    return int(round_half_away(_f32(value) / _f32(scale))) + int(zero_point)


def relu_table(in_scale: float, in_zp: int, out_scale: float, out_zp: int, act_max: float = math.inf) -> np.ndarray:
    """TFLM int8 RELU (`ReluQuantized`): rescaled by in_scale/out_scale, then clamped to [0, act_max]."""
    multiplier, shift = quantize_multiplier(float(_f32(in_scale)) / float(_f32(out_scale)))
    lo = max(INT8_MIN, _quantize_float(0.0, out_scale, out_zp))
    hi = INT8_MAX if act_max == math.inf else min(INT8_MAX, _quantize_float(act_max, out_scale, out_zp))
    out = multiply_by_quantized_multiplier(INT8_INPUTS - in_zp, multiplier, shift) + out_zp
    return np.minimum(np.maximum(out, lo), hi).astype(np.int8)


def relu6_table(in_scale: float, in_zp: int) -> np.ndarray:
    """TFLM int8 RELU6 (`Relu6Quantized`): the raw input clamped to [zero point, 6 on the input's scale]."""
    six = min(max(_quantize_float(6.0, in_scale, in_zp), INT8_MIN), INT8_MAX)
    return np.minimum(np.maximum(INT8_INPUTS, in_zp), six).astype(np.int8)


def leaky_relu_table(in_scale: float, in_zp: int, out_scale: float, out_zp: int, alpha: float) -> np.ndarray:
    """TFLM int8 LEAKY_RELU: identity and alpha multipliers formed from float32 products."""
    alpha_mult, alpha_shift = quantize_multiplier(float(_f32(_f32(in_scale) * _f32(alpha)) / _f32(out_scale)))
    id_mult, id_shift = quantize_multiplier(float(_f32(in_scale) / _f32(out_scale)))
    x = INT8_INPUTS - in_zp
    out = np.where(x >= 0, multiply_by_quantized_multiplier(x, id_mult, id_shift), multiply_by_quantized_multiplier(x, alpha_mult, alpha_shift))
    return np.clip(out + out_zp, INT8_MIN, INT8_MAX).astype(np.int8)


def _i16_high_mul(a: np.ndarray, b: np.ndarray | int, rounding: bool = True) -> np.ndarray:
    """int16 `SaturatingRoundingDoublingHighMul` (or, without rounding, `SaturatingDoublingHighMul`)."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    ab = a * b
    if rounding:
        ab = ab + np.where(ab >= 0, 1 << 14, 1 - (1 << 14))
    q = np.where(ab >= 0, ab >> 15, -((-ab) >> 15))
    return np.where((a == b) & (a == -(2**15)), 2**15 - 1, q)


def _i16_saturating_left_shift(x: np.ndarray, amount: int) -> np.ndarray:
    return np.clip(x * (1 << amount), -(2**15), 2**15 - 1)


def _to_int16_multiplier(multiplier: int) -> int:
    """TFLite's `DownScaleInt32ToInt16Multiplier`."""
    if multiplier >= I32_MAX - (1 << 15):
        return 2**15 - 1
    return (multiplier + (1 << 15)) >> 16


def hard_swish_table(in_scale: float, in_zp: int, out_scale: float, out_zp: int) -> np.ndarray:
    """TFLM int8 HARD_SWISH: TFLite's int16 fixed-point chain (reluish and output multipliers in float32)."""
    hires_scale = _f32(1.0 / 128.0) * _f32(in_scale)
    out_mult, out_exp = quantize_multiplier(float(_f32(hires_scale / _f32(out_scale))))
    relu_mult, relu_exp = quantize_multiplier(float(_f32(hires_scale / _f32(3.0 / 32768.0))))
    out_mult16, relu_mult16 = _to_int16_multiplier(out_mult), _to_int16_multiplier(relu_mult)
    if out_exp > 0:
        raise ValueError(f"HARD_SWISH output multiplier exponent {out_exp} > 0 (TFLM refuses these scales)")
    hires = (INT8_INPUTS - in_zp) * 128
    preshift = _i16_high_mul(hires, out_mult16)
    reluish = hires
    if relu_exp > 0:
        reluish = _i16_saturating_left_shift(reluish, relu_exp - 1)
    reluish = _i16_high_mul(reluish, relu_mult16)
    if relu_exp > 0:
        reluish = _i16_saturating_left_shift(reluish, 1)
    if relu_exp < 0:
        reluish = divide_by_power_of_two(reluish, -relu_exp)
    reluish = (reluish + (1 << 15)) >> 1
    out = divide_by_power_of_two(_i16_high_mul(reluish, preshift, rounding=False), -out_exp) + out_zp
    return np.clip(out, INT8_MIN, INT8_MAX).astype(np.int8)

