"""LayerNormalization becomes `layer_norm`, which normalizes the last axis.

The scale and bias must be constants; they are broadcast to the normalized
shape and flattened (a missing bias is zeros). Normalizing several trailing
axes runs on a view that folds them into one, between two reshapes (free in
the generated code). A LayerNormalization whose Mean or InvStdDev outputs
are read is left alone (kernel_form reports it).
"""
from __future__ import annotations

import numpy as np

from kiln.ir.graph import Graph, Node
from kiln.normalize.rewrite import Rewriter


def run(graph: Graph) -> tuple[Graph, bool]:
    rw = Rewriter(graph)
    for node in rw.walk():
        if node.op == "LayerNormalization" and rw.tensor(node.inputs[0]).dtype == "float32":
            new = _lower(rw, node)
            if new is not None:
                rw.replace(node, new)
    return rw.finish()


def _lower(rw: Rewriter, node: Node) -> list[Node] | None:
    x, y = rw.tensor(node.inputs[0]), rw.tensor(node.outputs[0])
    rank = len(x.shape)
    axis = int(node.attrs.get("axis", -1)) % rank
    scale = rw.const(node.inputs[1])
    bias = rw.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else np.zeros(1, np.float32)
    if scale is None or bias is None or any(rw.consumers(o) or o in rw.outputs for o in node.outputs[1:]):
        return None
    inner = int(np.prod(x.shape[axis:]))
    params = [rw.constant(f"{node.name}/{what}", np.broadcast_to(v, x.shape[axis:]).reshape(inner).astype(np.float32))
              for what, v in (("gamma", scale), ("beta", bias))]
    attrs = {"epsilon": float(node.attrs.get("epsilon", 1e-5))}
    if axis == rank - 1:
        return [node.copy(op="layer_norm", inputs=[x.name, *params], outputs=node.outputs[:1], attrs=attrs)]
    flat = (*x.shape[:axis], inner)
    xf, yf = rw.tensor_like(f"{x.name}/rows", flat, x.dtype), rw.tensor_like(f"{y.name}/rows", flat, y.dtype)
    return [
        rw.node(f"{node.name}/rows", "reshape", [x.name], [xf], {"shape": list(flat)}, node),
        node.copy(op="layer_norm", inputs=[xf, *params], outputs=[yf], attrs=attrs),
        rw.node(f"{node.name}/unrows", "reshape", [yf], [y.name], {"shape": list(y.shape)}, node),
    ]
