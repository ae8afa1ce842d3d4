"""Integer parameters of the int8 ops, derived from quantization parameters as TFLite's Prepare does.

Scales are float32 values (QuantParams stores them so); every real multiplier
is formed in double from them, then split by `checked_multiplier`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kiln.numerics.fixedpoint import checked_multiplier

ADD_LEFT_SHIFT = 20  # TFLite's left shift for int8 add/sub


@dataclass(frozen=True)
class AddParams:
    """TFLite int8 add/sub: both inputs rescaled to a common scale (2·max input scale) then requantized."""

    a_offset: int
    a_mult: int
    a_shift: int
    b_offset: int
    b_mult: int
    b_shift: int
    left_shift: int
    out_mult: int
    out_shift: int
    out_zp: int


def add_params(a: tuple[float, int], b: tuple[float, int], out: tuple[float, int]) -> AddParams:
    """Each argument is (scale, zero_point); as TFLite's `PrepareGeneralSubOp`/add Prepare."""
    twice_max = 2.0 * max(a[0], b[0])
    a_mult, a_shift = checked_multiplier(a[0] / twice_max, "add input")
    b_mult, b_shift = checked_multiplier(b[0] / twice_max, "add input")
    out_mult, out_shift = checked_multiplier(twice_max / ((1 << ADD_LEFT_SHIFT) * out[0]), "add output")
    return AddParams(-a[1], a_mult, a_shift, -b[1], b_mult, b_shift, ADD_LEFT_SHIFT, out_mult, out_shift, out[1])


def mul_multiplier(a_scale: float, b_scale: float, out_scale: float) -> tuple[int, int]:
    """TFLite int8 mul: one multiplier for a_scale·b_scale/out_scale."""
    return checked_multiplier(a_scale * b_scale / out_scale, "mul output")


def channel_multipliers(in_scale: float, w_scales: tuple[float, ...], out_scale: float, channels: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-output-channel (multiplier, shift) int32 arrays of a conv/fc, as `PopulateConvolutionQuantizationParams`.

    A per-tensor weight scale is replicated over `channels`.
    """
    if len(w_scales) not in (1, channels):
        raise ValueError(f"{len(w_scales)} weight scales for {channels} output channels")
    scales = w_scales if len(w_scales) == channels else w_scales * channels
    pairs = [checked_multiplier(in_scale * ws / out_scale, "output channel") for ws in scales]
    mult = np.array([m for m, _ in pairs], dtype=np.int32)
    shift = np.array([s for _, s in pairs], dtype=np.int32)
    return mult, shift


def mean_multiplier(in_scale: float, out_scale: float, count: int) -> tuple[int, int]:
    """int8 mean of `count` values: in_scale/out_scale with 1/count folded in, as TFLite's `QuantizedMeanOrSum`.

    The multiplier of in_scale/out_scale is scaled by 2^k / count (truncating),
    k = floor(log2 count) kept at most 32 and at most 31 + shift, and the shift
    lowered by k.
    """
    mult, shift = requant_multiplier(in_scale, out_scale)
    k = min(count.bit_length() - 1, 32, 31 + shift)
    return (mult << k) // count, shift - k


def requant_multiplier(in_scale: float, out_scale: float) -> tuple[int, int]:
    """int8 → int8 rescaling (TFLite's Requantize): in_scale/out_scale."""
    return checked_multiplier(in_scale / out_scale, "requantize")
