"""A clamp after a concat moves onto the concat's inputs, where activation fusion folds it into their producers.

`split_groups` turns a grouped conv into convs joined by a concat, so the
ReLU of a grouped conv (and any ReLU after a concat of conv branches) sits
after the concat. Left there, the conv outputs are quantized over their
pre-activation range, half of it for negative values the ReLU discards.
A clamp commutes with concatenation: moved onto each input, it fuses into
each producer, whose output is then quantized over the activation's range.
The move is made only when every input comes from an op that takes a fused
activation and is read by the concat alone, so no standalone clamp appears,
and never on tensors carrying QDQ parameters (a source's choice stays).
"""
from __future__ import annotations

from kiln.ir.graph import Graph
from kiln.normalize.rewrite import ACT_OPS, Rewriter


def run(graph: Graph) -> tuple[Graph, bool]:
    rw = Rewriter(graph)
    for clamp in rw.walk():
        cat = rw.producer(clamp.inputs[0]) if clamp.op == "clamp" else None
        if cat is None or cat.op != "concat" or not rw.only_user(clamp.inputs[0], clamp):
            continue
        names = cat.inputs + cat.outputs + clamp.outputs
        if any(rw.tensor(n).quant is not None for n in names):
            continue
        producers = [rw.producer(i) for i in cat.inputs]
        if not all(p is not None and p.op in ACT_OPS and rw.only_user(i, cat) for p, i in zip(producers, cat.inputs)):
            continue
        clamps, inputs = [], []
        for i, name in enumerate(cat.inputs):
            t = rw.tensor(name)
            out = rw.tensor_like(f"{clamp.name}/in{i}", t.shape, t.dtype, layout=t.layout)
            clamps.append(rw.node(f"{clamp.name}/in{i}", "clamp", [name], [out], dict(clamp.attrs), clamp))
            inputs.append(out)
        rw.replace(cat, clamps + [cat.copy(inputs=inputs, outputs=list(clamp.outputs))])
        rw.remove(clamp)
    return rw.finish()
