"""Transpose cancellation: consecutive transposes compose into one, and a transpose that only moves size-1 dimensions is a reshape.

transpose(transpose(x, p1), p2) = transpose(x, [p1[i] for i in p2]); when
that is the identity, `remove_noops` drops it.
"""
from __future__ import annotations

from kiln.ir.graph import Graph
from kiln.normalize.layout import unit_only
from kiln.normalize.rewrite import Rewriter


def run(graph: Graph) -> tuple[Graph, bool]:
    rw = Rewriter(graph)
    for node in rw.walk():
        if node.op != "transpose":
            continue
        perm = list(node.attrs["perm"])
        inner = rw.producer(node.inputs[0])
        if inner is not None and inner.op == "transpose":
            composed = [inner.attrs["perm"][i] for i in perm]
            rw.replace(node, [node.copy(inputs=list(inner.inputs), attrs={"perm": composed})])
        elif perm != sorted(perm) and unit_only(rw.tensor(node.inputs[0]).shape, perm):
            rw.replace(node, [node.copy(op="reshape", attrs={"shape": list(rw.tensor(node.outputs[0]).shape)})])
    return rw.finish()
