"""SiLU fusion: x * Sigmoid(x) (either operand order, source or kernel spelling) becomes `silu(x)`."""
from __future__ import annotations

from kiln.ir.graph import Graph
from kiln.normalize.patterns import interior, kind, product
from kiln.normalize.rewrite import Rewriter


def run(graph: Graph) -> tuple[Graph, bool]:
    rw = Rewriter(graph)
    for node in rw.walk():
        if kind(node) != "mul":
            continue
        coeff, rest = product(rw, node.outputs[0])
        if coeff != 1.0 or len(rest) != 2:
            continue
        for x, s in (rest, rest[::-1]):
            sigmoid = rw.producer(s)
            if kind(sigmoid) == "sigmoid" and sigmoid.inputs[0] == x and interior(rw, node.outputs[0], {x}):
                rw.replace(sigmoid, [])
                rw.replace(node, [node.copy(op="silu", inputs=[x], attrs={})])
                break
    return rw.finish()
