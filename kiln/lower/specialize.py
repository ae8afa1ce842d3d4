"""What the lower stage proves about an int8 layer so kernels can take their fast paths.

- `requant_facts`: the KILN_RQ_* bits of `runtime/kiln_kernels.h`. FAST holds
  when every channel shifts right by 1 to 23 with a positive multiplier and no
  accumulator can leave (-2^30, 2^30): the folded bias plus 128 times the sum
  of the channel's absolute weights bounds every partial sum, since every
  input value (a padded position's zero point included) lies in [-128, 127].
  FULL holds when the activation range is the whole int8 range. UNIFORM
  (given to fully connected layers) holds when every channel shares one
  multiplier and shift, so the kernel loads them once.
- `mul_facts`: the same bits for kiln_mul_s8, whose accumulator is one
  product of two offset int8 values: FAST needs only the shift and multiplier
  (and offsets and zero point of int8 parameters, which keep the kernel's
  int16 lanes and results in range).
- `*_scratch`: the arena bytes a kernel's scratch path needs, the formulas
  stated with each kernel in the header; 0 when that exceeds
  `kernels.scratch_limit`, so the kernel takes its path without scratch.
  `depthwise_strip` sizes the depthwise strip to what it saves: the rows
  of a few output rows' windows, never more than the layer's own maps.
- `add_table`: kiln_add_table_s8's table and rounding term, when the sum of
  two table entries and its requantization stay inside int32 (the fast
  requantization's bounds: |t| < 2^31, shift in [1, 22]).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kiln.numerics.fixedpoint import requantize, wrap_int32
from kiln.numerics.params import AddParams

KILN_RQ_FAST = 1
KILN_RQ_FULL = 2
KILN_RQ_UNIFORM = 4
FAST_SHIFTS = range(-23, 0)
ACC_BOUND = 2**30
INPUT_BOUND = 128
# A depthwise strip is tall enough that the rows it shares with the next (widened twice) are at most
# 1/SHARED_ROWS of the rows it widens; taller strips save little more (docs/cortex-m.md, "Kernel scratch").
SHARED_ROWS = 8


def requant_facts(bias: np.ndarray, weights: np.ndarray, channel_axis: int, mult: np.ndarray, shift: np.ndarray,
                  act_min: int, act_max: int) -> int:
    """KILN_RQ_* of a layer: `bias` folded (int32 per channel), `weights` int8 with channels along `channel_axis`."""
    w = np.moveaxis(np.abs(weights.astype(np.int64)), channel_axis, 0).reshape(weights.shape[channel_axis], -1)
    bound = np.abs(bias.astype(np.int64)) + INPUT_BOUND * w.sum(axis=1)
    fast = bool(np.all(bound < ACC_BOUND) and np.all(mult > 0) and all(int(s) in FAST_SHIFTS for s in shift))
    full = act_min == -128 and act_max == 127
    return (KILN_RQ_FAST if fast else 0) | (KILN_RQ_FULL if full else 0)


def mul_facts(mult: int, shift: int, a_offset: int, b_offset: int, out_zp: int, act_min: int, act_max: int) -> int:
    """KILN_RQ_FAST/FULL of an int8 mul: |(x + offset)| <= 255 for int8 x, so |product| < 2^16 < ACC_BOUND."""
    int8_params = all(-127 <= off <= 128 for off in (a_offset, b_offset)) and -128 <= out_zp <= 127
    fast = int8_params and mult > 0 and shift in FAST_SHIFTS
    return (KILN_RQ_FAST if fast else 0) | (KILN_RQ_FULL if act_min == -128 and act_max == 127 else 0)


def uniform_fact(mult: np.ndarray, shift: np.ndarray) -> int:
    """KILN_RQ_UNIFORM when every channel has the same multiplier and shift."""
    return KILN_RQ_UNIFORM if len(set(zip(np.asarray(mult).tolist(), np.asarray(shift).tolist()))) == 1 else 0


def depthwise_strip(geo: dict[str, int], limit: int) -> int:
    """The scratch the lower stage gives kiln_depthwise_conv2d_s8, sized to what it saves: a strip widens
    again the rows its last window shares with the next strip's first, so it holds the windows of whole
    output rows until those shared rows are at most 1/SHARED_ROWS of the rows it widens (16 rows for a 3x3
    window with stride 1, 9 with stride 2); within `limit` and within the bytes of the layer's input and
    output maps (scratch never doubles the layer's live bytes). None when one window's rows do not fit, and
    none with a channel multiplier that is a multiple of 4, whose path without scratch is the faster."""
    if geo["ch_mult"] % 4 == 0:
        return 0
    cols = (geo["out_w"] - 1) * geo["stride_w"] + (geo["k_w"] - 1) * geo["dil_w"] + 1
    span, stride = (geo["k_h"] - 1) * geo["dil_h"] + 1, geo["stride_h"]
    rows = span + stride * -(-max(SHARED_ROWS * (span - stride) - span, 0) // stride)
    maps = geo["n"] * geo["in_c"] * (geo["in_h"] * geo["in_w"] + geo["out_h"] * geo["out_w"] * geo["ch_mult"])
    return depthwise_scratch(geo, min(limit, 4 * (2 * geo["k_h"] * geo["k_w"] + 24) + 3 + 8 * cols * rows, maps))


def depthwise_scratch(geo: dict[str, int], limit: int) -> int:
    """kiln_depthwise_conv2d_s8's scratch: the group block and a strip of padded int16 rows, as tall as
    the limit allows up to every row the windows reach, at least one window's."""
    cols = (geo["out_w"] - 1) * geo["stride_w"] + (geo["k_w"] - 1) * geo["dil_w"] + 1
    span = (geo["k_h"] - 1) * geo["dil_h"] + 1
    total = (geo["out_h"] - 1) * geo["stride_h"] + span
    fixed = 4 * (2 * geo["k_h"] * geo["k_w"] + 24) + 3
    rows = min(total, max(span, (limit - fixed) // (8 * cols)))
    return _within(fixed + 8 * cols * rows, limit)


def gemm_scratch(k: int, out_c: int, limit: int) -> int:
    """The conv and 1x1 kernels' scratch: the per-channel requantization table, four pixels' k values
    widened to int16, one pixel's int8 row."""
    return _within(16 * out_c + 9 * (-(-k // 4) * 4) + 3, limit)


def conv_add_scratch(k: int, out_c: int, limit: int) -> int:
    """kiln_conv2d_add_s8's scratch: the conv's and the int8 conv outputs of 16 pixels (64 below 16 channels)."""
    return _within(gemm_scratch(k, out_c, 2**62) + (16 if out_c >= 16 else 64) * out_c, limit)


def _within(size: int, limit: int) -> int:
    return size if size <= limit else 0


@dataclass(frozen=True)
class AddTable:
    table: np.ndarray  # int32[512]: twice a's rescaled values for a = -128..127, then b's (negated to subtract)
    mult: int
    round: int
    shift: int  # the right shift, >= 1


def add_table(p: AddParams, subtract: bool) -> AddTable | None:
    """kiln_add_table_s8's constants for TFLite's add/sub `p`, or None when its arithmetic does not fit."""
    values = np.arange(-128, 128, dtype=np.int64)
    a = requantize(wrap_int32((values + p.a_offset) << p.left_shift), p.a_mult, p.a_shift)
    b = requantize(wrap_int32((values + p.b_offset) << p.left_shift), p.b_mult, p.b_shift)
    b = -b if subtract else b
    shift = -p.out_shift
    if not (1 <= shift <= 22 and p.out_mult > 0 and 2 * (int(np.abs(a).max()) + int(np.abs(b).max())) < 2**31):
        return None
    table = np.concatenate([2 * a, 2 * b]).astype(np.int32)
    return AddTable(table, p.out_mult, 2 ** (shift - 1) + p.out_zp * 2**shift, shift)
