"""Float NumPy building blocks shared by the source-level and kernel-level ops.

Everything here works on NCHW arrays in float64 and lets callers cast back,
so references are more exact than the float32 frameworks they are checked
against.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def pad_spatial(x: np.ndarray, pads: list[int], value: float = 0.0) -> np.ndarray:
    """Pad the trailing spatial axes of an NC... array; pads = begins then ends."""
    spatial = x.ndim - 2
    width = [(0, 0), (0, 0)] + [(pads[i], pads[i + spatial]) for i in range(spatial)]
    return np.pad(x, width, constant_values=value)


def windows(x: np.ndarray, kernel: list[int], strides: list[int], dilations: list[int]) -> np.ndarray:
    """Windows of an NCHW array: shape (N, C, OH, OW, KH, KW)."""
    kh, kw = kernel
    dh, dw = dilations
    span = sliding_window_view(x, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(2, 3))
    return span[:, :, :: strides[0], :: strides[1], ::dh, ::dw]


def conv2d_nchw(x, w, b, strides, pads, dilations, group) -> np.ndarray:
    x = pad_spatial(np.asarray(x, np.float64), pads)
    w = np.asarray(w, np.float64)
    oc, icg, kh, kw = w.shape
    win = windows(x, [kh, kw], strides, dilations)  # N, C, OH, OW, KH, KW
    n, _, oh, ow = win.shape[:4]
    win = win.reshape(n, group, icg, oh, ow, kh, kw)
    wg = w.reshape(group, oc // group, icg, kh, kw)
    out = np.einsum("ngchwij,gocij->ngohw", win, wg, optimize=True).reshape(n, oc, oh, ow)
    if b is not None:
        out = out + np.asarray(b, np.float64).reshape(1, oc, 1, 1)
    return out


def conv_transpose2d(x, w, b, strides, pads, dilations, output_padding, group) -> np.ndarray:
    """Each input pixel scatters its weights (in, out/group, kh, kw) into the output (output_padding more zero rows and
    columns at the end), which the pads then crop."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    n, cin, h, wd = x.shape
    _, per, kh, kw = w.shape
    (sh, sw), (dh, dw) = strides, dilations
    full = np.zeros((n, per * group, (h - 1) * sh + dh * (kh - 1) + 1 + output_padding[0], (wd - 1) * sw + dw * (kw - 1) + 1 + output_padding[1]))
    cg = cin // group
    for g in range(group):
        xs, ws = x[:, g * cg:(g + 1) * cg], w[g * cg:(g + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                full[:, g * per:(g + 1) * per, i * dh:i * dh + (h - 1) * sh + 1:sh, j * dw:j * dw + (wd - 1) * sw + 1:sw] += \
                    np.einsum("nchw,co->nohw", xs, ws[:, :, i, j])
    out = full[:, :, pads[0]:full.shape[2] - pads[2], pads[1]:full.shape[3] - pads[3]]
    return out if b is None else out + np.asarray(b, np.float64).reshape(1, -1, 1, 1)


def conv_nd(x, w, b, strides, pads, dilations, group) -> np.ndarray:
    """Conv for 1-D or 2-D spatial inputs (1-D as 2-D with height 1)."""
    if x.ndim == 3:
        out = conv2d_nchw(x[:, :, None, :], w[:, :, None, :], b, [1, strides[0]], [0, pads[0], 0, pads[1]], [1, dilations[0]], group)
        return out[:, :, 0, :]
    return conv2d_nchw(x, w, b, strides, pads, dilations, group)


def max_pool_nchw(x, kernel, strides, pads, dilations=(1, 1), ceil_extra=(0, 0)) -> np.ndarray:
    """The maximum over each window, taken tap by tap (one strided slice per kernel position: no window copies)."""
    x = np.asarray(x, np.float64)
    padded = pad_spatial(x, [pads[0], pads[1], pads[2] + ceil_extra[0], pads[3] + ceil_extra[1]], -np.inf)
    oh, ow = windows(padded, kernel, strides, list(dilations)).shape[2:4]
    out = None
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            r, c = i * dilations[0], j * dilations[1]
            tap = padded[:, :, r:r + (oh - 1) * strides[0] + 1:strides[0], c:c + (ow - 1) * strides[1] + 1:strides[1]]
            out = tap.copy() if out is None else np.maximum(out, tap, out=out)
    return out


def avg_pool_nchw(x, kernel, strides, pads, count_include_pad: bool, ceil_extra=(0, 0)) -> np.ndarray:
    """Average pool; windows that run past the padding (ceil mode) never count those positions."""
    x = np.asarray(x, np.float64)
    full = [pads[0], pads[1], pads[2] + ceil_extra[0], pads[3] + ceil_extra[1]]
    total = windows(pad_spatial(x, full), kernel, strides, [1, 1]).sum(axis=(-2, -1))
    ones = np.ones((1, 1) + x.shape[2:])
    if count_include_pad:
        inside = pad_spatial(np.ones((1, 1) + x.shape[2:]), pads, 1.0)
        count = windows(pad_spatial(inside, [0, 0, ceil_extra[0], ceil_extra[1]]), kernel, strides, [1, 1]).sum(axis=(-2, -1))
    else:
        count = windows(pad_spatial(ones, full), kernel, strides, [1, 1]).sum(axis=(-2, -1))
    return total / count


def gelu(x: np.ndarray, approximate: str) -> np.ndarray:
    x = np.asarray(x, np.float64)
    if approximate == "tanh":
        return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))
    from math import erf, sqrt

    return 0.5 * x * (1.0 + np.vectorize(erf, otypes=[np.float64])(x / sqrt(2.0)))


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray | None, axes: int, epsilon: float) -> np.ndarray:
    """Normalize over the last `axes` axes (population variance), then scale and shift (a constant row with
    epsilon 0 is 0/0: NaN, as ONNX computes it)."""
    x = np.asarray(x, np.float64)
    over = tuple(range(x.ndim - axes, x.ndim))
    centered = x - x.mean(axis=over, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        y = centered / np.sqrt((centered * centered).mean(axis=over, keepdims=True) + epsilon) * np.asarray(gamma, np.float64)
    return y if beta is None else y + np.asarray(beta, np.float64)


def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    x = np.asarray(x, np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def sigmoid(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def hardsigmoid(x: np.ndarray, alpha: float = 1.0 / 6.0, beta: float = 0.5) -> np.ndarray:
    return np.clip(alpha * np.asarray(x, np.float64) + beta, 0.0, 1.0)
