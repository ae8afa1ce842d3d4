"""Dead-code elimination: nodes none of whose outputs reach a graph output, and unused constants."""
from __future__ import annotations

from kiln.ir.graph import Graph


def run(graph: Graph) -> tuple[Graph, bool]:
    g = graph.copy()
    needed = set(g.outputs)
    kept = []
    for node in reversed(g.nodes):
        if any(o in needed for o in node.outputs):
            kept.append(node)
            needed.update(i for i in node.inputs if i)
    changed = len(kept) != len(g.nodes)
    g.nodes = kept[::-1]
    changed = g.remove_unused_tensors() or changed
    return g, changed
