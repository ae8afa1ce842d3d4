"""Consecutive reshapes merge: reshape(reshape(x)) is one reshape of x to the final shape."""
from __future__ import annotations

from kiln.ir.graph import Graph
from kiln.normalize.rewrite import Rewriter


def run(graph: Graph) -> tuple[Graph, bool]:
    rw = Rewriter(graph)
    for node in rw.walk():
        inner = rw.producer(node.inputs[0]) if node.op == "reshape" else None
        if inner is not None and inner.op == "reshape":
            rw.replace(node, [node.copy(inputs=list(inner.inputs))])
    return rw.finish()
