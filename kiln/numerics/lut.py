"""256-entry tables for int8 elementwise functions, populated as TFLite's `LUTPopulate`.

Entry i holds the output for input value i − 128. The dequantized input,
the rescaling by 1/output_scale and the rounding are float32 as in TFLite;
the function itself is evaluated in float64 and rounded to float32, which is
what a correctly rounded float32 `transform` would return.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from kiln.numerics.fixedpoint import INT8_MAX, INT8_MIN, activation_range, clamp, round_half_away
from kiln.numerics.functions import elementwise

LUT_SIZE = 256


def lut_inputs(scale: float, zero_point: int) -> np.ndarray:
    """The float32 value of every int8 input, in table order: scale · (q − zero_point)."""
    q = np.arange(INT8_MIN, INT8_MAX + 1, dtype=np.int32)
    return np.float32(scale) * (q - int(zero_point)).astype(np.float32)


def build_lut(fn: Callable[[np.ndarray], np.ndarray], in_scale: float, in_zp: int, out_scale: float, out_zp: int) -> np.ndarray:
    """The int8 table of `fn` (a float64 elementwise function) for the given input/output quantization."""
    x = lut_inputs(in_scale, in_zp)
    y = np.asarray(fn(x.astype(np.float64)), dtype=np.float64).astype(np.float32)
    inverse = np.float32(1.0) / np.float32(out_scale)
    with np.errstate(over="ignore", invalid="ignore"):
        rescaled = round_half_away(y * inverse)
    rescaled = np.where(np.isnan(rescaled), -np.inf, rescaled)
    q = np.clip(rescaled, -(2.0**24), 2.0**24).astype(np.int64) + int(out_zp)
    return np.clip(q, INT8_MIN, INT8_MAX).astype(np.int8)


def op_table(op: str, attrs: dict[str, Any], in_scale: float, in_zp: int, out_scale: float, out_zp: int) -> np.ndarray:
    """The int8 table of elementwise op `op`.

    A clamp is the identity rescaled to the output parameters, then clamped to integer bounds
    derived as for a fused activation (TFLite's `CalculateActivationRangeQuantized`: the bound
    divided by the scale, ties away from zero). Tabling the clamped real value instead would
    round a bound lying on a half-step by the reciprocal product, one step off TFLite's
    MAXIMUM/MINIMUM/RELU6 and off the same bounds fused into a conv.
    """
    if op != "clamp":
        return build_lut(elementwise(op, attrs), in_scale, in_zp, out_scale, out_zp)
    lo, hi = activation_range(float(attrs.get("act_min", -math.inf)), float(attrs.get("act_max", math.inf)), out_scale, out_zp)
    return clamp(build_lut(lambda x: x, in_scale, in_zp, out_scale, out_zp), lo, hi).astype(np.int8)


def apply_lut(x: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Look every int8 element of `x` up in `table`."""
    return table[np.asarray(x, np.int64) + 128]
