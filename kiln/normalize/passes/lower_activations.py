"""Activations to kernel ops.

Relu is `clamp` [0, inf) and Clip(lo, hi) is `clamp` [lo, hi] — so Clip(0, 6)
is ReLU6, range [0, 6] — ready for `fuse_activation`. Softmax over the last
axis is `softmax`; over another axis it runs between transposes that bring
that axis last (the layout passes usually cancel them).
"""
from __future__ import annotations

from kiln.ir.graph import Graph, Node
from kiln.normalize.layout import permuted, transpose_node
from kiln.normalize.rewrite import INF, Rewriter, inverse, transpose_quant

SAME = {"Sigmoid": "sigmoid", "Tanh": "tanh", "HardSwish": "hardswish"}


def run(graph: Graph) -> tuple[Graph, bool]:
    rw = Rewriter(graph)
    for node in rw.walk():
        if not node.inputs or rw.tensor(node.inputs[0]).dtype != "float32":
            continue
        new = _lower(rw, node)
        if new is not None:
            rw.replace(node, new)
    return rw.finish()


def _lower(rw: Rewriter, node: Node) -> list[Node] | None:
    a = node.attrs
    if node.op == "Relu":
        return [node.copy(op="clamp", attrs={"act_min": 0.0, "act_max": INF})]
    if node.op == "Clip":
        bounds = [rw.const(i) if i else None for i in (node.inputs + ["", ""])[1:3]]
        if any(i and b is None for i, b in zip(node.inputs[1:3], bounds)):
            return None
        lo, hi = (float(b.ravel()[0]) if b is not None else default for b, default in zip(bounds, (-INF, INF)))
        return [node.copy(op="clamp", inputs=node.inputs[:1], attrs={"act_min": lo, "act_max": hi})]
    if node.op in SAME:
        return [node.copy(op=SAME[node.op], attrs={})]
    if node.op == "LeakyRelu":
        return [node.copy(op="leaky_relu", attrs={"alpha": float(a.get("alpha", 0.01))})]
    if node.op == "HardSigmoid":
        return [node.copy(op="hardsigmoid", attrs={"alpha": float(a.get("alpha", 0.2)), "beta": float(a.get("beta", 0.5))})]
    if node.op == "Gelu":
        return [node.copy(op="gelu", attrs={"approximate": a.get("approximate", "none")})]
    if node.op == "Softmax":
        return _softmax(rw, node)
    return None


def _softmax(rw: Rewriter, node: Node) -> list[Node]:
    x, y = rw.tensor(node.inputs[0]), rw.tensor(node.outputs[0])
    rank = len(x.shape)
    axis = node.attrs.get("axis", -1) % rank
    if axis == rank - 1:
        return [node.copy(op="softmax", attrs={"beta": 1.0})]
    perm = [i for i in range(rank) if i != axis] + [axis]
    xt = rw.tensor_like(f"{x.name}/axis_last", permuted(x.shape, perm), x.dtype, transpose_quant(x.quant, perm))
    yt = rw.tensor_like(f"{y.name}/axis_last", permuted(y.shape, perm), y.dtype, transpose_quant(y.quant, perm))
    return [
        transpose_node(rw, f"{node.name}/axis_last", x.name, xt, perm, node),
        node.copy(op="softmax", inputs=[xt], outputs=[yt], attrs={"beta": 1.0}),
        transpose_node(rw, f"{node.name}/axis_back", yt, y.name, inverse(perm), node),
    ]
