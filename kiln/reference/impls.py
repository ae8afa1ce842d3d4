"""The float implementation table, per op, and the decorator that fills it (`float_ops`, `source_ops`)."""
from __future__ import annotations

from typing import Callable

import numpy as np

from kiln.ir.graph import Node

Impl = Callable[[Node, list[np.ndarray | None]], list[np.ndarray]]
FLOAT_IMPLS: dict[str, Impl] = {}


def impl(*ops: str, table: dict[str, Impl] = FLOAT_IMPLS):
    """Register a NumPy implementation for `ops`: fn(node, inputs) -> outputs."""

    def register(fn: Impl) -> Impl:
        for name in ops:
            table[name] = fn
        return fn

    return register
