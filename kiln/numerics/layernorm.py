"""int8 layer normalization over the last axis, in integers only (TFLite has no int8 builtin for it).

For a row of L int8 values x with (s_x, z_x), d = x - z_x, S = sum(d) and
Q = sum(d²), the normalized values are exactly

    n_i = (x_i - mean) / sqrt(var + eps) = t_i / sqrt(V),   t_i = L·d_i - S,
    V = L·Q - S² + E,                                       E = round(eps·L² / s_x²),

so only E carries a rounding. The kernel takes s = isqrt(V·4^F) (F puts it in
[2^30, 2^31)), inv = floor(2^62 / s), and n_i in Q16 as
round(t_i·inv / 2^(62 − F − 16)); then y_i = γ_i·n_i + β_i on the output grid:

    q_i = z_y + round((n_i·G_i + B_i·2^(P − P_b)) / 2^P),

with G_i = round(γ_i / s_y · 2^(P − 16)) and B_i = round(β_i / s_y · 2^P_b) int32.
P gives the largest |G| 30 bits (less only when β would overflow 64 bits);
P_b ≤ P gives the largest |B| 30 bits. Roundings are half up (add half, floor
shift). Every product stays below 2^62 for rows up to MAX_SIZE values, so the
C kernel computes the same integers in int64. A row of equal values (V = 0,
eps = 0) normalizes to 0.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

K = 16  # fraction bits of the normalized values
MAX_SIZE = 1 << 16


@dataclass(frozen=True)
class LayerNormParams:
    size: int
    input_zp: int
    eps_term: int  # E
    out_shift: int  # P
    bias_shift: int  # P - P_b
    out_zp: int
    gamma: np.ndarray  # G, int32
    beta: np.ndarray  # B, int32


def _bits(value: float) -> int:
    """ceil(log2(value)) for value > 0 (0 for values up to 1)."""
    return max(0, math.ceil(math.log2(value))) if value > 0 else 0


def layer_norm_params(gamma: np.ndarray, beta: np.ndarray, epsilon: float, in_q: tuple[float, int], out_q: tuple[float, int]) -> LayerNormParams:
    """The integer constants of an int8 layer norm; ValueError when the row is too long or the scales unusable."""
    size = int(np.size(gamma))
    if not 1 <= size <= MAX_SIZE:
        raise ValueError(f"int8 layer norm over {size} values (at most {MAX_SIZE})")
    (s_x, z_x), (s_y, z_y) = in_q, out_q
    g = np.asarray(gamma, np.float64).reshape(-1) / float(s_y)
    b = np.asarray(beta, np.float64).reshape(-1) / float(s_y)
    g_max, b_max = float(np.max(np.abs(g))), float(np.max(np.abs(b)))
    out_shift = min(K + 30 - _bits(g_max), 61 - _bits(b_max))
    if out_shift < 1:
        raise ValueError(f"layer norm weights {g_max:.3g} and bias {b_max:.3g} output steps are out of range")
    b_frac = max(0, min(out_shift, 30 - _bits(b_max)))
    eps_term = min(int(round(float(epsilon) * size * size / (float(s_x) ** 2))), 1 << 61)
    G = np.round(g * 2.0 ** (out_shift - K)).astype(np.int64)
    B = np.clip(np.round(b * 2.0 ** b_frac), -(2**31 - 1), 2**31 - 1).astype(np.int64)
    return LayerNormParams(size, int(z_x), eps_term, out_shift, out_shift - b_frac, int(z_y), G.astype(np.int32), B.astype(np.int32))


def _round_shift(v: np.ndarray, s: int) -> np.ndarray:
    return (v + (1 << (s - 1))) >> s


def layer_norm_s8(x: np.ndarray, p: LayerNormParams, lo: int = -128, hi: int = 127) -> np.ndarray:
    """The int8 layer norm of every row (last axis) of `x`, as the C kernel computes it."""
    rows = np.asarray(x, np.int64).reshape(-1, p.size) - p.input_zp
    gamma, beta = p.gamma.astype(np.int64), p.beta.astype(np.int64) << p.bias_shift
    out = np.empty(rows.shape, np.int64)
    for r, d in enumerate(rows):
        total, squares = int(d.sum()), int((d * d).sum())
        v = max(p.size * squares - total * total + p.eps_term, 1)
        f = (62 - v.bit_length()) // 2
        inv = (1 << 62) // math.isqrt(v << (2 * f))
        n = _round_shift((p.size * d - total) * inv, 62 - f - K)
        out[r] = _round_shift(n * gamma + beta, p.out_shift) + p.out_zp
    return np.clip(out, lo, hi).astype(np.int8).reshape(np.shape(x))
