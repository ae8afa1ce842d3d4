"""Matching helpers for fusions that must see through both source (`Mul`) and kernel (`mul`) spellings."""
from __future__ import annotations

import numpy as np

from kiln.ir.graph import Node
from kiln.normalize.rewrite import INF, Rewriter, act_range


def kind(node: Node | None) -> str:
    """The op name shared by its source and kernel spellings, or "" for a node with a fused activation."""
    if node is None or act_range(node) != (-INF, INF):
        return ""
    return node.op.lower()


def scalar(rw: Rewriter, name: str) -> float | None:
    """The value of a constant whose entries are all equal, else None."""
    c = rw.const(name)
    if c is None or c.size == 0 or not np.all(c == c.flat[0]):
        return None
    return float(c.flat[0])


def close(value: float | None, want: float, rtol: float = 1e-4) -> bool:
    return value is not None and abs(value - want) <= rtol * abs(want)


def product(rw: Rewriter, name: str, root: bool = True) -> tuple[float, list[str]]:
    """Tensor `name` as coefficient x operands, seeing through products and divisions by constants.

    Interior results must be read only once; constant factors multiply into
    the coefficient.
    """
    value = scalar(rw, name)
    if value is not None:
        return value, []
    node = rw.producer(name)
    if not root and (len(rw.consumers(name)) != 1 or name in rw.outputs):
        return 1.0, [name]
    if kind(node) == "mul":
        (ca, ra), (cb, rb) = product(rw, node.inputs[0], False), product(rw, node.inputs[1], False)
        return ca * cb, ra + rb
    divisor = scalar(rw, node.inputs[1]) if kind(node) == "div" else None
    if divisor:
        c, rest = product(rw, node.inputs[0], False)
        return c / divisor, rest
    return 1.0, [name]


def addend(rw: Rewriter, name: str, constant: float) -> str | None:
    """For tensor `name` = t + constant (either order), t; else None."""
    node = rw.producer(name)
    if kind(node) != "add":
        return None
    for a, b in (node.inputs, node.inputs[::-1]):
        if close(scalar(rw, b), constant):
            return a
    return None


def interior(rw: Rewriter, root: str, leaves: set[str]) -> list[Node]:
    """The nodes computing `root` from `leaves`; empty if any of them is read from outside the pattern."""
    nodes: list[Node] = []
    stack = [root]
    while stack:
        name = stack.pop()
        node = rw.producer(name)
        if name in leaves or node is None or any(n is node for n in nodes):
            continue
        nodes.append(node)
        stack.extend(i for i in node.inputs if i and rw.const(i) is None)
    inside = {o for n in nodes for o in n.outputs} - {root}
    for name in inside:
        if name in rw.outputs or any(not any(c is n for n in nodes) for c in rw.consumers(name)):
            return []
    return nodes
