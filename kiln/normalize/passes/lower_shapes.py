"""Data-movement ops to kernel form, with every shape an attribute.

Reshape, Flatten, Squeeze, Unsqueeze (and an Identity or eval Dropout that
`remove_noops` had to keep, because it copies a graph input to a graph
output) become `reshape` to the static output shape; Transpose becomes
`transpose` with an explicit perm; Concat becomes `concat` with a
non-negative axis.
"""
from __future__ import annotations

from kiln.ir.graph import Graph, Node
from kiln.normalize.rewrite import Rewriter

RESHAPES = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"})


def run(graph: Graph) -> tuple[Graph, bool]:
    rw = Rewriter(graph)
    for node in rw.walk():
        if not node.inputs or rw.tensor(node.inputs[0]).dtype not in ("float32", "int8"):
            continue
        x, rank = node.inputs[0], len(rw.tensor(node.inputs[0]).shape)
        if node.op in RESHAPES and _plain(rw, node):
            y = rw.tensor(node.outputs[0])
            rw.replace(node, [node.copy(op="reshape", inputs=[x], outputs=[y.name], attrs={"shape": list(y.shape)})])
        elif node.op == "Transpose":
            perm = list(node.attrs.get("perm", range(rank)[::-1]))
            rw.replace(node, [node.copy(op="transpose", attrs={"perm": perm})])
        elif node.op == "Concat":
            rw.replace(node, [node.copy(op="concat", attrs={"axis": node.attrs["axis"] % rank})])
    return rw.finish()


def _plain(rw: Rewriter, node: Node) -> bool:
    """Whether a reshape-like node is a pure data move: no extra output read, Dropout in eval mode."""
    if any(rw.consumers(o) or o in rw.outputs for o in node.outputs[1:]):
        return False
    mode = node.inputs[2] if node.op == "Dropout" and len(node.inputs) > 2 else ""
    return not mode or (rw.const(mode) is not None and not rw.const(mode).any())
