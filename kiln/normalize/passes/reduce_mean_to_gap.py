"""ReduceMean as a global average pool.

Over every spatial axis of an N-C-spatial tensor it is a GlobalAveragePool
(which the layout passes bring to NHWC), followed by a reshape when
keepdims=0. Over any other set of axes the input is viewed as
[outer, reduced, 1, inner] — after a transpose that brings the reduced axes
together, if they are not — so that `global_avg_pool` (the mean over axes 1
and 2) computes it, and a reshape gives the result its shape.
"""
from __future__ import annotations

import numpy as np

from kiln.ir.graph import Graph, Node
from kiln.normalize.rewrite import Rewriter, reshape_quant, transpose_quant


def run(graph: Graph) -> tuple[Graph, bool]:
    rw = Rewriter(graph)
    for node in rw.walk():
        axes = _axes(rw, node) if node.op == "ReduceMean" else None
        if axes is None or rw.tensor(node.inputs[0]).dtype != "float32":
            continue
        x, y = rw.tensor(node.inputs[0]), rw.tensor(node.outputs[0])
        if len(x.shape) in (3, 4) and axes == list(range(2, len(x.shape))):
            if node.attrs.get("keepdims", 1):
                rw.replace(node, [node.copy(op="GlobalAveragePool", inputs=[x.name], attrs={})])
                continue
            mid = rw.tensor_like(f"{y.name}/keepdims", x.shape[:2] + (1,) * (len(x.shape) - 2), x.dtype, y.quant)
            pool = node.copy(op="GlobalAveragePool", inputs=[x.name], outputs=[mid], attrs={})
            rw.replace(node, [pool, _reshape(rw, node, mid, y.name, y.shape)])
        else:
            rw.replace(node, _as_pool(rw, node, axes))
    return rw.finish()


def _axes(rw: Rewriter, node: Node) -> list[int] | None:
    rank = len(rw.tensor(node.inputs[0]).shape)
    axes = node.attrs.get("axes")
    if axes is None and len(node.inputs) > 1 and node.inputs[1]:
        c = rw.const(node.inputs[1])
        if c is None:
            return None
        axes = [int(a) for a in c.ravel()]
    if not axes:
        return None if node.attrs.get("noop_with_empty_axes", 0) else list(range(rank))
    return sorted(a % rank for a in axes)


def _reshape(rw: Rewriter, node: Node, x: str, y: str, shape: tuple[int, ...], suffix: str = "squeeze") -> Node:
    return rw.node(f"{node.name}/{suffix}", "reshape", [x], [y], {"shape": list(shape)}, node)


def _as_pool(rw: Rewriter, node: Node, axes: list[int]) -> list[Node]:
    x, y = rw.tensor(node.inputs[0]), rw.tensor(node.outputs[0])
    nodes, source, shape = [], x.name, x.shape
    if axes != list(range(axes[0], axes[-1] + 1)):
        perm = [a for a in range(len(shape)) if a not in axes] + axes
        shape = tuple(shape[p] for p in perm)
        source = rw.tensor_like(f"{y.name}/reduced_last", shape, x.dtype, transpose_quant(x.quant, perm))
        nodes.append(rw.node(f"{node.name}/reduced_last", "transpose", [x.name], [source], {"perm": perm}, node))
        axes = list(range(len(shape) - len(axes), len(shape)))
    outer, inner = int(np.prod(shape[: axes[0]])), int(np.prod(shape[axes[-1] + 1 :]))
    view = (outer, int(np.prod([shape[a] for a in axes])), 1, inner)
    viewed = rw.tensor_like(f"{y.name}/view", view, x.dtype, reshape_quant(rw.tensor(source).quant, shape, view))
    pooled = rw.tensor_like(f"{y.name}/pooled", (outer, 1, 1, inner), x.dtype, y.quant)
    nodes.append(_reshape(rw, node, source, viewed, view, "view"))
    nodes.append(node.copy(op="global_avg_pool", inputs=[viewed], outputs=[pooled], attrs={}))
    nodes.append(_reshape(rw, node, pooled, y.name, y.shape))
    return nodes
