"""GELU fusion: the Erf and Tanh decompositions become `gelu` (approximate "none" / "tanh").

Erf form:  0.5 * x * (1 + erf(x / sqrt(2)))
Tanh form: 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))
Products may be associated in any order, divisions by a constant count as
products, and x^3 may be Pow(x, 3) or x * x * x. Every intermediate result
must be read only inside the pattern.
"""
from __future__ import annotations

import math

from kiln.ir.graph import Graph
from kiln.normalize.patterns import addend, close, interior, kind, product, scalar
from kiln.normalize.rewrite import Rewriter


def run(graph: Graph) -> tuple[Graph, bool]:
    rw = Rewriter(graph)
    for node in rw.walk():
        if kind(node) not in ("mul", "div"):
            continue
        match = _match(rw, node.outputs[0])
        nodes = interior(rw, node.outputs[0], {match[0]}) if match else []
        if nodes:
            for n in nodes:
                if n is not node:
                    rw.remove(n)
            rw.replace(node, [node.copy(op="gelu", inputs=[match[0]], attrs={"approximate": match[1]})])
    return rw.finish()


def _match(rw: Rewriter, root: str) -> tuple[str, str] | None:
    coeff, rest = product(rw, root)
    if not close(coeff, 0.5) or len(rest) != 2:
        return None
    for x, a in (rest, rest[::-1]):
        t = addend(rw, a, 1.0)
        fn = rw.producer(t) if t else None
        if kind(fn) == "erf" and _single(rw, fn.inputs[0], 1 / math.sqrt(2)) == x:
            return x, "none"
        if kind(fn) == "tanh" and _tanh_arg(rw, fn.inputs[0]) == x:
            return x, "tanh"
    return None


def _single(rw: Rewriter, name: str, coeff: float) -> str | None:
    """For tensor `name` = coeff * t, t; else None."""
    c, rest = product(rw, name)
    return rest[0] if close(c, coeff) and len(rest) == 1 else None


def _tanh_arg(rw: Rewriter, name: str) -> str | None:
    w = _single(rw, name, math.sqrt(2 / math.pi))
    add = rw.producer(w) if w else None
    if kind(add) != "add":
        return None
    for x, z in (add.inputs, add.inputs[::-1]):
        c, rest = product(rw, z, False)
        cube = rw.producer(rest[0]) if len(rest) == 1 else None
        if close(c, 0.044715) and (rest == [x, x, x] or (kind(cube) == "pow" and cube.inputs[0] == x and scalar(rw, cube.inputs[1]) == 3.0)):
            return x
    return None
