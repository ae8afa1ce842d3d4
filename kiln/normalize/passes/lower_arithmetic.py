"""Float arithmetic to kernel ops: Add/Sub/Mul/Div/Max/Min become add/sub/mul/div/maximum/minimum with no fused activation.

Division by a constant becomes multiplication by its reciprocal (`div` has
no int8 kernel), Neg(x) is x * -1, Pow(x, 2) is x * x and Reciprocal(x)
is 1 / x (a float-only `div`).
"""
from __future__ import annotations

import numpy as np

from kiln.ir.graph import Graph, Node
from kiln.normalize.rewrite import Rewriter, no_act

BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Max": "maximum", "Min": "minimum"}


def run(graph: Graph) -> tuple[Graph, bool]:
    rw = Rewriter(graph)
    for node in rw.walk():
        if node.op not in (*BINARY, "Neg", "Pow", "Reciprocal") or rw.tensor(node.inputs[0]).dtype != "float32":
            continue
        new = _lower(rw, node)
        if new is not None:
            rw.replace(node, [new])
    return rw.finish()


def _lower(rw: Rewriter, node: Node) -> Node | None:
    x = node.inputs[0]
    if node.op == "Neg":
        return node.copy(op="mul", inputs=[x, rw.constant(f"{node.name}/minus_one", np.float32(-1.0))], attrs=no_act())
    if node.op == "Reciprocal":
        return node.copy(op="div", inputs=[rw.constant(f"{node.name}/one", np.float32(1.0)), x], attrs=no_act())
    if node.op == "Pow":
        exponent = rw.const(node.inputs[1])
        if exponent is None or exponent.size != 1 or float(exponent.ravel()[0]) != 2.0:
            return None
        return node.copy(op="mul", inputs=[x, x], attrs=no_act())
    divisor = rw.const(node.inputs[1]) if node.op == "Div" else None
    if divisor is not None and np.all(divisor != 0):
        t = rw.tensor(node.inputs[1])
        inverse = rw.constant(f"{t.name}/reciprocal", (1.0 / divisor.astype(np.float64)).astype(np.float32))
        return node.copy(op="mul", inputs=[x, inverse], attrs=no_act())
    return node.copy(op=BINARY[node.op], attrs=no_act())
