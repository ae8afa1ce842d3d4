"""The int8 implementation table and what its implementations share.

An int8 implementation is `fn(graph, node, inputs) -> outputs`: unlike float
ones it reads quantization parameters from the graph's tensors. The table's
`bind(graph)` gives the executor an ordinary per-op table in which each op
runs its int8 implementation when its first input is int8 (or it has no
float implementation, like `quantize`), and the float one inside float
islands.
"""
from __future__ import annotations

import functools
import math
from typing import Callable

import numpy as np

from kiln.errors import KilnError, node_context
from kiln.ir.graph import Graph, Node, Tensor
from kiln.numerics.fixedpoint import INT8_MAX, INT8_MIN, activation_range, clamp, requantize
from kiln.reference.impls import FLOAT_IMPLS

Int8Impl = Callable[[Graph, Node, list[np.ndarray | None]], list[np.ndarray]]


class Int8Table(dict):
    """op name -> Int8Impl; `bind` makes the executor table for one graph."""

    def bind(self, graph: Graph) -> dict[str, Callable]:
        ops = sorted(set(self) | set(FLOAT_IMPLS))
        return {op: functools.partial(_dispatch, self.get(op), FLOAT_IMPLS.get(op), graph) for op in ops}


INT8_IMPLS = Int8Table()


def int8_impl(*ops: str):
    def register(fn: Int8Impl) -> Int8Impl:
        for name in ops:
            INT8_IMPLS[name] = fn
        return fn

    return register


def _dispatch(int8_fn: Int8Impl | None, float_fn, graph: Graph, node: Node, ins: list[np.ndarray | None]) -> list[np.ndarray]:
    first = graph.tensors[node.inputs[0]].dtype if node.inputs and node.inputs[0] else "float32"
    if float_fn is not None and (first not in ("int8", "uint8") or int8_fn is None):
        if first in ("int8", "uint8"):
            raise _error(graph, node, "no int8 implementation")
        return float_fn(node, ins)
    try:
        return int8_fn(graph, node, ins)
    except ValueError as exc:
        raise _error(graph, node, str(exc)) from None


def _error(graph: Graph, node: Node, reason: str) -> KilnError:
    return KilnError(f"{node_context(graph.nodes.index(node), node.name, node.op, node.source, node.source_name)}: {reason}")


def qparams(t: Tensor) -> tuple[float, int]:
    """Per-tensor (scale, zero point) of an int8 activation."""
    if t.quant is None or len(t.quant.scale) != 1:
        raise ValueError(f"tensor {t.name!r} needs per-tensor quantization parameters")
    return t.quant.scale[0], t.quant.zero_point[0]


def io_params(graph: Graph, node: Node) -> tuple[tuple[float, int], tuple[float, int]]:
    """(scale, zp) of the first input and the first output."""
    return qparams(graph.tensors[node.inputs[0]]), qparams(graph.tensors[node.outputs[0]])


def require_same_params(graph: Graph, node: Node) -> None:
    inp, out = io_params(graph, node)
    if inp != out:
        raise ValueError(f"input quantization {inp} differs from output {out} (this op keeps its input's parameters)")


def act_bounds(graph: Graph, node: Node) -> tuple[int, int]:
    """int8 clamp bounds of the node's fused activation under its output parameters."""
    scale, zp = qparams(graph.tensors[node.outputs[0]])
    return activation_range(float(node.attrs.get("act_min", -math.inf)), float(node.attrs.get("act_max", math.inf)), scale, zp)


def to_output(acc: np.ndarray, multiplier, shift, out_zp: int, lo: int = INT8_MIN, hi: int = INT8_MAX) -> np.ndarray:
    """requantize, add the output zero point, clamp: the tail of every int8 arithmetic kernel."""
    return clamp(requantize(acc, multiplier, shift) + out_zp, lo, hi).astype(np.int8)
