"""Dead-code elimination: nodes none of whose outputs reach a graph output, and unused constants."""
from __future__ import annotations

from kiln.ir.graph import Graph


def run(graph: Graph) -> tuple[Graph, bool]:
    needed = set(graph.outputs)
    kept = []
    for node in reversed(graph.nodes):
        if any(o in needed for o in node.outputs):
            kept.append(node)
            needed.update(i for i in node.inputs if i)
    used = set(graph.inputs) | set(graph.outputs) | {o for n in kept for o in n.outputs}
    if len(kept) == len(graph.nodes) and graph.tensors.keys() <= needed | used:
        return graph, False
    meta = {k: list(v) if isinstance(v, list) else v for k, v in graph.meta.items()}
    tensors = {k: t for k, t in graph.tensors.items() if k in needed or k in used}
    return Graph(graph.name, tensors, kept[::-1], list(graph.inputs), list(graph.outputs), meta), True
