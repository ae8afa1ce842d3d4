"""Constant folding: a node whose inputs are all constant becomes constants.

Values come from the float reference executor, cast to the declared output
dtype exactly as the executor casts them, so folding never changes a result.
`Shape` folds even on a variable input, since shapes are static; that is what
collapses shape arithmetic (Shape -> Gather -> Concat -> Reshape) into
constant operands. A QDQ annotation on a moved constant follows it.
"""
from __future__ import annotations

import numpy as np

from kiln.ir.graph import DTYPES, Graph, Node
from kiln.normalize.rewrite import Rewriter, reshape_quant, transpose_quant
from kiln.reference import float_ops, source_ops  # noqa: F401  (register implementations)
from kiln.reference.impls import FLOAT_IMPLS

RESHAPES = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", "reshape"})


def run(graph: Graph) -> tuple[Graph, bool]:
    rw = Rewriter(graph)
    for node in rw.walk():
        values = _evaluate(rw, node)
        if values is None:
            continue
        for name, value in zip(node.outputs, values):
            t = rw.tensor(name)
            data = np.asarray(value).astype(DTYPES[t.dtype], copy=False).reshape(t.shape)
            rw.set_tensor(name, data=data, quant=t.quant or _moved_quant(rw, node, name))
        rw.remove(node)
    return rw.finish()


def _evaluate(rw: Rewriter, node: Node) -> list[np.ndarray] | None:
    if node.op == "Shape":
        shape = rw.tensor(node.inputs[0]).shape
        return [np.asarray(shape[node.attrs.get("start", 0) : node.attrs.get("end", len(shape))], np.int64)]
    present = [i for i in node.inputs if i]
    fn = FLOAT_IMPLS.get(node.op)
    if fn is None or not present or any(rw.const(i) is None for i in present):
        return None
    return fn(node, [rw.const(i) for i in node.inputs])


def _moved_quant(rw: Rewriter, node: Node, out: str):
    """The source's fixed parameters carried through an op that only moves data."""
    x = rw.tensor(node.inputs[0])
    if node.op in ("Transpose", "transpose"):
        return transpose_quant(x.quant, node.attrs.get("perm", list(range(len(x.shape)))[::-1]))
    if node.op in RESHAPES and out == node.outputs[0]:
        return reshape_quant(x.quant, x.shape, rw.tensor(out).shape)
    return None
