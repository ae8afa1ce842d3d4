"""The real functions behind the int8 elementwise ops, as tabled into LUTs.

Evaluated elementwise with Python's `math` (the platform libm, scalar), so a
table does not depend on which SIMD path NumPy picks on a given CPU.
Attribute defaults match the float reference (`kiln/reference/float_ops.py`).
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

Scalar = Callable[[float], float]


def _sigmoid(v: float) -> float:
    if v >= 0:
        return 1.0 / (1.0 + math.exp(-v))
    e = math.exp(v)
    return e / (1.0 + e)


def _hardsigmoid(alpha: float, beta: float) -> Scalar:
    return lambda v: min(max(alpha * v + beta, 0.0), 1.0)


def _gelu(approximate: str) -> Scalar:
    if approximate == "tanh":
        k = math.sqrt(2.0 / math.pi)
        return lambda v: 0.5 * v * (1.0 + math.tanh(k * (v + 0.044715 * v**3)))
    return lambda v: 0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0)))


def _lrn_scale(bias: float, alpha_over_size: float, beta: float) -> Scalar:
    """LRN's factor (bias + alpha / size * v)^-beta of a window's sum of squares v; where `math.pow` raises,
    NumPy's power: infinity for a base of 0, NaN for a negative one with a fractional exponent."""
    def fn(v: float) -> float:
        base = bias + alpha_over_size * v
        if base == 0 and beta > 0:
            return math.inf
        try:
            return math.pow(base, -beta)
        except ValueError:
            return math.nan

    return fn


def scalar_function(op: str, attrs: dict[str, Any]) -> Scalar:
    """The float64 function computed by elementwise op `op` with attributes `attrs`."""
    if op == "sigmoid":
        return _sigmoid
    if op == "tanh":
        return math.tanh
    if op == "hardsigmoid":
        return _hardsigmoid(float(attrs.get("alpha", 1.0 / 6.0)), float(attrs.get("beta", 0.5)))
    if op == "hardswish":
        hs = _hardsigmoid(1.0 / 6.0, 0.5)
        return lambda v: v * hs(v)
    if op == "silu":
        return lambda v: v * _sigmoid(v)
    if op == "gelu":
        return _gelu(str(attrs.get("approximate", "none")))
    if op == "leaky_relu":
        alpha = float(attrs["alpha"])
        return lambda v: v if v >= 0 else v * alpha
    if op == "clamp":
        lo, hi = float(attrs.get("act_min", -math.inf)), float(attrs.get("act_max", math.inf))
        return lambda v: min(max(v, lo), hi)
    if op == "lrn_scale":
        return _lrn_scale(float(attrs["bias"]), float(attrs["alpha_over_size"]), float(attrs["beta"]))
    raise ValueError(f"no elementwise function for op {op!r}")


def elementwise(op: str, attrs: dict[str, Any]) -> Callable[[np.ndarray], np.ndarray]:
    """`scalar_function` applied to every element of a float64 array."""
    fn = scalar_function(op, attrs)
    return lambda x: np.array([fn(float(v)) for v in np.ravel(x)], dtype=np.float64).reshape(np.shape(x))


ELEMENTWISE_OPS = ("sigmoid", "tanh", "hardsigmoid", "hardswish", "silu", "gelu", "leaky_relu", "clamp", "lrn_scale")
