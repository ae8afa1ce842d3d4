"""Fixed-point arithmetic of the TFLite / CMSIS-NN int8 scheme.

- `quantize_multiplier` is TFLite's `QuantizeMultiplier`: a positive real
  multiplier as a Q31 significand in [2^30, 2^31) and a power-of-two shift.
- `requantize` is CMSIS-NN's `arm_nn_requantize` (default double rounding):
  `arm_nn_doubling_high_mult_no_sat(val << left_shift, multiplier)` then
  `arm_nn_divide_by_power_of_two(.., right_shift)`. The left shift wraps
  modulo 2^32 as the int32 multiply does on the target.
- `activation_range` is TFLite's `CalculateActivationRangeQuantized`,
  generalized from the fixed ReLU bounds to any float `act_min`/`act_max`.

Arrays are int64 holding int32 values, so intermediate products are exact.
"""
from __future__ import annotations

import math

import numpy as np

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
INT8_MIN = -128
INT8_MAX = 127
MAX_SHIFT = 31  # |shift| bound of a requantization; larger left shifts lose every bit


def round_half_away(x: np.ndarray | float) -> np.ndarray:
    """Round to nearest, ties away from zero (C `round`/`roundf`, `TfLiteRound`), in x's float type."""
    x = np.asarray(x)
    whole = np.trunc(x)
    frac = x - whole  # exact for binary floats
    return whole + np.where(np.abs(frac) >= 0.5, np.sign(x), 0).astype(x.dtype)


def wrap_int32(v: np.ndarray | int) -> np.ndarray:
    """Values modulo 2^32 in [-2^31, 2^31): what an int32 register holds after wrapping arithmetic."""
    v = np.asarray(v, dtype=np.int64)
    return ((v - INT32_MIN) & 0xFFFFFFFF) + INT32_MIN


def trunc_div(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    """Integer division rounding toward zero, as C99 `/` does."""
    a = np.asarray(a, dtype=np.int64)
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (np.asarray(b) < 0), -q, q)


def quantize_multiplier(real: float) -> tuple[int, int]:
    """TFLite `QuantizeMultiplier`: real ≈ multiplier · 2^(shift − 31), multiplier in [2^30, 2^31).

    Zero, and multipliers too small to matter (shift < −31), become (0, 0).
    """
    real = float(real)
    if not math.isfinite(real) or real < 0:
        raise ValueError(f"multiplier {real!r} is not a finite non-negative number")
    if real == 0.0:
        return 0, 0
    significand, shift = math.frexp(real)
    q = int(round_half_away(significand * 2.0**31))
    if q == 2**31:
        q //= 2
        shift += 1
    if shift < -MAX_SHIFT:
        return 0, 0
    return q, shift


def checked_multiplier(real: float, what: str) -> tuple[int, int]:
    """`quantize_multiplier`, refusing multipliers whose shift the kernels cannot apply."""
    multiplier, shift = quantize_multiplier(real)
    if shift > MAX_SHIFT - 1:
        raise ValueError(f"{what} multiplier {real:.6g} is too large for int32 requantization (scales out of range?)")
    return multiplier, shift


def doubling_high_mult_no_sat(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """CMSIS-NN `arm_nn_doubling_high_mult_no_sat`: (a·b + 2^30) >> 31, wrapped to int32."""
    prod = np.asarray(a, np.int64) * np.asarray(b, np.int64) + (1 << 30)
    return wrap_int32(prod >> 31)


def divide_by_power_of_two(x: np.ndarray, exponent: np.ndarray | int) -> np.ndarray:
    """CMSIS-NN `arm_nn_divide_by_power_of_two`: x / 2^exponent rounded half away from zero."""
    x = np.asarray(x, np.int64)
    exponent = np.asarray(exponent, np.int64)
    mask = (np.int64(1) << exponent) - 1
    remainder = x & mask
    result = x >> exponent
    threshold = (mask >> 1) + (result < 0)
    return result + (remainder > threshold)


def requantize(acc: np.ndarray, multiplier: np.ndarray | int, shift: np.ndarray | int) -> np.ndarray:
    """CMSIS-NN `arm_nn_requantize` on int32 values (broadcasting per-channel multiplier/shift)."""
    shift = np.asarray(shift, np.int64)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    shifted = wrap_int32(wrap_int32(acc) << left)
    return divide_by_power_of_two(doubling_high_mult_no_sat(shifted, multiplier), right)


def clamp(x: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """max then min, in TFLite's order (so lo > hi gives hi)."""
    return np.minimum(np.maximum(x, lo), hi)


def quantize_value(value: float, scale: float, zero_point: int) -> int:
    """TFLite's `zero_point + (int32)round(value / scale)` with float32 division, unclamped."""
    q = round_half_away(np.float32(value) / np.float32(scale))
    return int(np.clip(q, -(2**24), 2**24)) + int(zero_point)


def activation_range(act_min: float, act_max: float, scale: float, zero_point: int) -> tuple[int, int]:
    """Integer clamp bounds of a fused activation, as TFLite's `CalculateActivationRangeQuantized`."""
    if math.isnan(act_min) or math.isnan(act_max):
        raise ValueError("activation bounds must not be NaN")
    lo = INT8_MIN if act_min == -math.inf else max(INT8_MIN, quantize_value(act_min, scale, zero_point))
    hi = INT8_MAX if act_max == math.inf else min(INT8_MAX, quantize_value(act_max, scale, zero_point))
    return lo, hi


def float_bits(value: float) -> int:
    """The IEEE-754 binary32 bit pattern of `value` as a signed int32 (how float kernel params are passed)."""
    return int(np.array(value, np.float32).view(np.int32))
