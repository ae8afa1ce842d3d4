"""No-op removal: nodes whose output equals their first input.

Identity, eval-mode Dropout, reshapes to the same shape, identity
transposes, casts to the same type, single-input concats, zero pads, full
slices, one-way splits, unbounded clamps, and `x + 0`, `x - 0`, `x * 1`,
`x / 1`. Readers of the output read the input instead; when the output is a
graph output, the input's producer is renamed to produce it. A node whose
input and output carry different QDQ parameters is a requantization, not a
no-op, and stays.
"""
from __future__ import annotations

import numpy as np

from kiln.ir.graph import Graph, Node
from kiln.normalize.rewrite import INF, Rewriter, act_range

ALWAYS = frozenset({"Identity", "Reshape", "reshape", "Flatten", "Squeeze", "Unsqueeze", "Cast", "split"})
NEUTRAL = {"Add": 0.0, "add": 0.0, "Sub": 0.0, "sub": 0.0, "Mul": 1.0, "mul": 1.0, "Div": 1.0, "div": 1.0}


def run(graph: Graph) -> tuple[Graph, bool]:
    rw = Rewriter(graph)
    for node in rw.walk():
        if _is_noop(rw, node):
            _bypass(rw, node)
    return rw.finish()


def _is_noop(rw: Rewriter, node: Node) -> bool:
    if not node.inputs or not node.inputs[0]:
        return False
    x, y = rw.tensor(node.inputs[0]), rw.tensor(node.outputs[0])
    if x.shape != y.shape or x.dtype != y.dtype or (x.quant and y.quant and x.quant != y.quant):
        return False
    op, a = node.op, node.attrs
    if op in ALWAYS:
        return True
    if op in ("Concat", "concat"):
        return len(node.inputs) == 1
    if op == "slice":
        return all(s == 1 for s in a["steps"])
    if op == "pad":
        return not any(a["pads"])
    if op == "Dropout":
        mode = rw.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else np.asarray(False)
        return mode is not None and not bool(mode) and all(not rw.consumers(o) and o not in rw.outputs for o in node.outputs[1:])
    if op in ("Transpose", "transpose"):
        return list(a.get("perm", range(len(x.shape))[::-1])) == list(range(len(x.shape)))
    if op == "clamp":
        return act_range(node) == (-INF, INF)
    if op in NEUTRAL and act_range(node) == (-INF, INF):
        c = rw.const(node.inputs[1])
        return c is not None and bool(np.all(c == NEUTRAL[op]))
    return False


def _bypass(rw: Rewriter, node: Node) -> None:
    x, y = node.inputs[0], node.outputs[0]
    if y not in rw.outputs:
        if rw.tensor(x).quant is None and rw.tensor(y).quant is not None:
            rw.set_tensor(x, quant=rw.tensor(y).quant)
        rw.replace_uses(y, x)
        rw.remove(node)
        return
    producer = rw.producer(x)
    if producer is None or x in rw.outputs:
        return  # a graph input (or constant) passed straight to an output: the node is the copy
    if rw.tensor(y).quant is None:
        rw.set_tensor(y, quant=rw.tensor(x).quant)
    rw.edit(producer, outputs=[y if o == x else o for o in producer.outputs])
    rw.replace_uses(x, y)
    rw.remove(node)
