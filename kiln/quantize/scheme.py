"""The int8 scheme, as TFLite specifies it and CMSIS-NN implements it: per-op parameter rules.

- Activations: asymmetric int8, per tensor; the range always contains 0 and the
  zero point is nudged as TFLite's `ChooseQuantizationParams` does.
- Weights: symmetric int8 (zero point 0) per output channel, scale
  max|w| / 127, values rounded half away from zero and clamped to [-127, 127].
- Bias: int32 at scale input_scale × weight_scale, zero point 0.
- Op rules (which outputs share their input's parameters, which are fixed) are
  the tables below; docs/ir.md lists the same rules.
"""
from __future__ import annotations

import numpy as np

from kiln.errors import KilnError
from kiln.ir.graph import QuantParams
from kiln.numerics.fixedpoint import INT8_MAX, INT8_MIN, INT32_MAX, INT32_MIN, round_half_away

WEIGHT_MAX = 127  # symmetric weights use [-127, 127]
BLOCK_ELEMENTS = 1 << 20  # weights quantized at a time

# Outputs take the (first) input's parameters: data movement and windowed average pooling (TFLite's
# AVERAGE_POOL_2D). A global average pool requantizes (TFLite's MEAN): its output, far narrower than its
# input, gets its own parameters.
SHARES_INPUT = frozenset({"max_pool2d", "reshape", "transpose", "slice", "split", "pad", "resize_nearest", "avg_pool2d"})
# Ops that only move values: in a QDQ source their outputs stay on the input's int8 grid.
DATA_MOVEMENT = (SHARES_INPUT - {"avg_pool2d"}) | {"concat"}
# Every input and the output share one scale and zero point.
UNIFIED = frozenset({"concat", "maximum", "minimum"})
# Outputs with parameters fixed by the kernel: arm_softmax_s8 writes 1/256 steps from -128. (TFLite also
# fixes LOGISTIC's and TANH's; Kiln runs them, like every int8 elementwise function, through a table that
# maps to any output parameters, so their outputs are calibrated: a tanh of small values keeps its
# precision instead of a 1/128 grid.)
FIXED_OUTPUT = {
    "softmax": QuantParams((1.0 / 256.0,), (-128,)),
}
# Ops whose input 1 is a weight tensor and input 2 an optional bias; value: the weights' output-channel axis.
WEIGHTED = {"conv2d": 0, "depthwise_conv2d": 3, "fully_connected": 0}
# Ops whose inputs after the first are float parameters the lower stage folds into integers (never int8 tensors).
PARAMETERS = frozenset({"layer_norm"})
# Ops without an int8 kernel.
FLOAT_ONLY = frozenset({"div", "quantize", "dequantize"})


def choose_qparams(lo: float, hi: float) -> QuantParams:
    """Per-tensor asymmetric int8 parameters for the float range [lo, hi] (TFLite's ChooseQuantizationParams).

    The range is widened to contain 0; an all-zero range gets scale 1 (any
    positive scale represents it exactly).
    """
    rmin, rmax = min(float(lo), 0.0), max(float(hi), 0.0)
    if rmin == rmax:
        return QuantParams((1.0,), (0,))
    qmin, qmax = float(INT8_MIN), float(INT8_MAX)
    scale = (rmax - rmin) / (qmax - qmin)
    from_min, from_max = qmin - rmin / scale, qmax - rmax / scale
    from_min_error = abs(qmin) + abs(rmin / scale)
    from_max_error = abs(qmax) + abs(rmax / scale)
    zero_point = from_min if from_min_error < from_max_error else from_max
    nudged = INT8_MIN if zero_point < qmin else INT8_MAX if zero_point > qmax else int(round_half_away(zero_point))
    return QuantParams((scale,), (nudged,))


def _broadcast(params: QuantParams, ndim: int) -> tuple[np.ndarray, np.ndarray]:
    """(scale, zero point) arrays shaped to broadcast against a tensor of rank `ndim`."""
    scale = np.asarray(params.scale, np.float32)
    zp = np.asarray(params.zero_point, np.int64)
    if params.axis is None:
        return scale[0], zp[0]
    shape = [1] * ndim
    shape[params.axis] = -1
    return scale.reshape(shape), zp.reshape(shape)


def quantize_array(x: np.ndarray, params: QuantParams, dtype: str = "int8", what: str = "values") -> np.ndarray:
    """float -> int8 (or a TFLite file's uint8) as TFLite's AffineQuantize: zero_point + round(x / scale) in
    float32, clamped.

    The clamp happens before any integer conversion, so every float beyond the
    integer range (up to infinity) saturates to the end with its sign; NaN has
    no integer value and is an error naming `what`.
    """
    with np.errstate(over="ignore", invalid="ignore"):  # beyond float32: +-inf, which saturates like any large value
        x = np.asarray(x, np.float32)
        if np.isnan(x).any():
            index = tuple(int(i) for i in np.unravel_index(int(np.argmax(np.isnan(x))), x.shape))
            raise KilnError(f"{what}: NaN at index {list(index)} has no int8 value")
        scale, zp = _broadcast(params, x.ndim)
        q = round_half_away(x / np.asarray(scale, np.float32)) + np.asarray(zp, np.float64)
    return np.clip(q, 0, 255).astype(np.uint8) if dtype == "uint8" else np.clip(q, INT8_MIN, INT8_MAX).astype(np.int8)


def dequantize_array(q: np.ndarray, params: QuantParams) -> np.ndarray:
    """int -> float64: scale * (q - zero_point)."""
    scale, zp = _broadcast(params, np.ndim(q))
    return np.asarray(scale, np.float64) * (np.asarray(q, np.int64) - zp)


def quantize_weights(w: np.ndarray, axis: int | None) -> tuple[np.ndarray, QuantParams]:
    """Symmetric int8 weights, one scale per index of `axis` (None: one scale for the tensor).

    scale = max|w| / 127 (an all-zero channel gets scale 1); values are
    round(w / scale) half away from zero, clamped to [-127, 127]. The float64
    arithmetic runs a block of rows at a time: a large layer's temporaries
    stay small (max|w| needs none: it is exact in the weights' own type).
    """
    w = np.asarray(w)
    over = tuple(a for a in range(w.ndim) if a != axis)
    top = np.max(w, axis=over, initial=-np.inf).reshape(-1).astype(np.float64)
    bottom = np.min(w, axis=over, initial=np.inf).reshape(-1).astype(np.float64)
    max_abs = np.maximum(np.maximum(top, -bottom), 0.0)
    scales = np.where(max_abs > 0, max_abs / WEIGHT_MAX, 1.0).astype(np.float32)
    params = QuantParams(tuple(float(s) for s in scales), (0,) * len(scales), axis)
    scale, _ = _broadcast(params, w.ndim)
    scale = np.asarray(scale, np.float64)
    blocks = w.reshape(1) if w.ndim == 0 else w
    q = np.empty(blocks.shape, np.int8)
    rows = max(1, BLOCK_ELEMENTS // max(1, blocks[:1].size))
    for start in range(0, len(blocks), rows):
        part = blocks[start : start + rows].astype(np.float64) / (scale[start : start + rows] if axis == 0 else scale)
        q[start : start + rows] = np.clip(round_half_away(part), -WEIGHT_MAX, WEIGHT_MAX).astype(np.int8)
    return q.reshape(w.shape), params


def recover_integers(data: np.ndarray, params: QuantParams, dtype: type = np.int8) -> np.ndarray | None:
    """The integers q with scale * (q - zero_point) == data exactly (float32), or None when there are none."""
    scale, zp = _broadcast(params, np.ndim(data))
    q = round_half_away(np.asarray(data, np.float64) / np.asarray(scale, np.float64)).astype(np.int64) + zp
    info = np.iinfo(dtype)
    if q.size and (q.min() < info.min or q.max() > info.max):
        return None
    back = (np.asarray(scale, np.float32) * (q - zp).astype(np.float32)).astype(np.float32)
    return q.astype(dtype) if np.array_equal(back, np.asarray(data, np.float32)) else None


def bias_params(input_params: QuantParams, weight_params: QuantParams) -> QuantParams:
    """Bias scale input_scale × weight_scale[c], zero point 0, along axis 0 when the weights are per channel."""
    s_in = float(input_params.scale[0])
    scales = tuple(s_in * float(s) for s in weight_params.scale)
    return QuantParams(scales, (0,) * len(scales), None if weight_params.axis is None else 0)


def quantize_bias(b: np.ndarray, params: QuantParams) -> np.ndarray:
    """int32 bias: round(b / scale) half away from zero (scale formed in double), saturated to int32."""
    scale = np.asarray([float(s) for s in params.scale], np.float64)
    q = round_half_away(np.asarray(b, np.float64) / scale)
    return np.clip(q, INT32_MIN, INT32_MAX).astype(np.int32)
