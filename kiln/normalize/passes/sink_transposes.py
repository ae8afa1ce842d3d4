"""Transpose sinking: op(transpose(x, p)) becomes transpose(op'(x), p) for ops that do not care about layout.

This is what carries NHWC from one channel-first op to the next: the
transpose back to NCHW after a conv moves down through activations,
arithmetic, concat, pad, slice, split, softmax (when p keeps the last axis
last) and reshapes that only add or drop size-1 dimensions, until it meets
the transpose into the next conv and `cancel_transposes` removes both. An op
sinks only when every non-constant input is the same transpose (at least one
a real `transpose`; a reshape equal to it counts too), so transposes merge as
they sink (a split hands one to each output) and always move towards the
outputs, which bounds the rewriting. Constant operands are transposed at
compile time.
"""
from __future__ import annotations

import numpy as np

from kiln.ir.graph import Graph, Node, QuantParams
from kiln.normalize.layout import permuted, transpose_node, unit_only
from kiln.normalize.rewrite import Rewriter, inverse, reshape_quant, transpose_quant

UNARY = frozenset({"clamp", "leaky_relu", "sigmoid", "tanh", "hardsigmoid", "hardswish", "silu", "gelu", "lrn_scale", "softmax"})
BINARY = frozenset({"add", "sub", "mul", "div", "maximum", "minimum"})
AXES = frozenset({"pad", "slice", "split", "concat", "reshape"})


def run(graph: Graph) -> tuple[Graph, bool]:
    rw = Rewriter(graph)
    for node in rw.walk():
        if node.op in UNARY | BINARY | AXES and node.inputs:
            _sink(rw, node)
    return rw.finish()


def _transposed(rw: Rewriter, name: str, perm: list[int] | None) -> str | None:
    """x when tensor `name` is transpose(x, perm) (any perm if None), by a transpose or an equal reshape."""
    p = rw.producer(name)
    if p is not None and p.op == "transpose" and (perm is None or list(p.attrs["perm"]) == perm):
        return p.inputs[0]
    if p is not None and p.op == "reshape" and perm is not None:
        shape = rw.tensor(p.inputs[0]).shape
        if len(shape) == len(perm) and permuted(shape, perm) == rw.tensor(name).shape and unit_only(shape, perm):
            return p.inputs[0]
    return None


def _sink(rw: Rewriter, node: Node) -> None:
    first = next((i for i in node.inputs if _transposed(rw, i, None)), None)
    if first is None:
        return
    perm = list(rw.producer(first).attrs["perm"])
    rank, inv = len(perm), inverse(perm)
    attrs = _attrs(rw, node, perm)
    if attrs is None:
        return
    inputs = []
    for name in node.inputs:
        t = rw.tensor(name)
        source = _transposed(rw, name, perm)
        if source is None and t.data is not None and node.op in BINARY | {"concat"}:
            source = _constant(rw, name, inv, rank, strip=node.op != "concat")
        if source is None:
            return
        inputs.append(source)
    if node.op == "reshape":
        _sink_reshape(rw, node, inputs[0], perm)
        return
    outs, backs = [], []
    for y in node.outputs:
        yt = rw.tensor(y)
        pre = rw.tensor_like(f"{y}/pre", permuted(yt.shape, inv), yt.dtype, transpose_quant(yt.quant, inv))
        outs.append(pre)
        backs.append(transpose_node(rw, f"{node.name}/transpose", pre, y, perm, node))
    rw.replace(node, [node.copy(inputs=inputs, outputs=outs, attrs=attrs), *backs])


def _attrs(rw: Rewriter, node: Node, perm: list[int]) -> dict | None:
    """The op's attributes on the untransposed input, or None if it cannot sink."""
    a, rank = dict(node.attrs), len(perm)
    if node.op == "softmax" and perm[-1] != rank - 1:
        return None
    if node.op in ("concat", "split"):
        a["axis"] = perm[a["axis"] % rank]
    for key in ("starts", "ends", "steps") if node.op == "slice" else ():
        a[key] = _scatter(a[key], perm)
    if node.op == "pad":
        a["pads"] = _scatter(a["pads"][:rank], perm) + _scatter(a["pads"][rank:], perm)
    if node.op in BINARY and any(len(t.shape) > rank or (t.data is None and len(t.shape) != rank) for t in map(rw.tensor, node.inputs)):
        return None
    return a


def _scatter(values: list, perm: list[int]) -> list:
    out = list(values)
    for i, p in enumerate(perm):
        out[p] = values[i]
    return out


def _constant(rw: Rewriter, name: str, inv: list[int], rank: int, strip: bool) -> str:
    """Constant c with transpose(c', perm) == c (broadcast to `rank` first), leading 1s dropped if `strip`."""
    t = rw.tensor(name)
    extra = rank - t.data.ndim
    data = np.transpose(t.data.reshape((1,) * extra + t.data.shape), inv)
    q = t.quant if t.quant is None or t.quant.axis is None else QuantParams(t.quant.scale, t.quant.zero_point, t.quant.axis + extra)
    q = transpose_quant(q, inv)
    lead = 0
    while strip and lead < data.ndim - 1 and data.shape[lead] == 1:
        lead += 1
    if q is not None and q.axis is not None and q.axis < lead:
        q = QuantParams(q.scale, q.zero_point, None)
    elif q is not None and q.axis is not None:
        q = QuantParams(q.scale, q.zero_point, q.axis - lead)
    return rw.constant(f"{name}/transposed", data.reshape(data.shape[lead:]), quant=q)


def _sink_reshape(rw: Rewriter, node: Node, x: str, perm: list[int]) -> None:
    """reshape(transpose(x, perm)) that only adds or drops size-1 dims, as transpose(reshape(x))."""
    xs, ys, out = rw.tensor(x).shape, rw.tensor(node.inputs[0]).shape, rw.tensor(node.outputs[0])
    keep = [i for i, d in enumerate(out.shape) if d != 1]
    if [d for d in ys if d != 1] != [out.shape[k] for k in keep]:
        return
    order = [a for a in range(len(xs)) if xs[a] != 1]  # x's non-unit axes in x order
    moved = [order.index(perm[j]) for j in range(len(ys)) if ys[j] != 1]
    shape = [1] * len(out.shape)
    new_perm = list(range(len(out.shape)))
    for i, k in enumerate(keep):
        shape[k] = xs[order[i]]
        new_perm[k] = keep[moved[i]]
    mid = rw.tensor_like(f"{out.name}/pre", tuple(shape), out.dtype, reshape_quant(rw.tensor(x).quant, xs, tuple(shape)))
    reshape = node.copy(inputs=[x], outputs=[mid], attrs={"shape": shape})
    rw.replace(node, [reshape, transpose_node(rw, f"{node.name}/transpose", mid, out.name, new_perm, node)])
