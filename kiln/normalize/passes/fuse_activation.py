"""Activation fusion: a `clamp` after an op with an activation range narrows that range instead.

Relu, ReLU6 and Clip are all `clamp` by now (see `lower_activations`), so
conv2d + Relu6 becomes conv2d with act range [0, 6]. The producer may sit
behind reshapes and transposes (a clamp commutes with moving data) as long
as every result on the way is read only by the next step. Disjoint ranges
are left alone: their composition is a constant, not an intersection.
"""
from __future__ import annotations

from kiln.ir.graph import Graph
from kiln.normalize.rewrite import ACT_OPS, Rewriter, act_range

MOVES = frozenset({"reshape", "transpose"})


def run(graph: Graph) -> tuple[Graph, bool]:
    rw = Rewriter(graph)
    for clamp in rw.walk():
        if clamp.op != "clamp":
            continue
        chain, name, user = [], clamp.inputs[0], clamp
        producer = rw.producer(name)
        while producer is not None and rw.only_user(name, user) and producer.op in MOVES:
            chain.append(producer)
            user, name = producer, producer.inputs[0]
            producer = rw.producer(name)
        if producer is None or producer.op not in ACT_OPS or not rw.only_user(name, user):
            continue
        (lo, hi), (clo, chi) = act_range(producer), act_range(clamp)
        lo, hi = max(lo, clo), min(hi, chi)
        if lo > hi:
            continue
        fused = producer.copy(attrs={**producer.attrs, "act_min": lo, "act_max": hi})
        if chain:
            rw.replace(chain[0], [chain[0].copy(outputs=list(clamp.outputs))])
        else:
            fused.outputs = list(clamp.outputs)
        rw.replace(producer, [fused])
        rw.remove(clamp)
    return rw.finish()
