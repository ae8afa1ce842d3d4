"""Slice, Split, Pad and Gather of activations to kernel `slice` / `split` / `pad` / `reshape` / `concat`.

The constant operands become attributes with one entry per dimension.
Negative Pad amounts crop, so such a Pad is a `slice` followed by a `pad`.
A Gather with constant indices selects along one axis: a scalar index is a
one-wide slice whose axis a reshape drops; evenly spaced indices are one
strided slice; others concatenate one-wide slices.
"""
from __future__ import annotations

from kiln.ir.graph import Graph, Node
from kiln.ir.source_ops import split_sizes
from kiln.normalize.rewrite import Rewriter


def run(graph: Graph) -> tuple[Graph, bool]:
    rw = Rewriter(graph)
    for node in rw.walk():
        if node.op not in LOWER or rw.tensor(node.inputs[0]).dtype != "float32":
            continue
        if any(rw.const(i) is None for i in node.inputs[1:] if i):
            continue
        new = LOWER[node.op](rw, node)
        if new is not None:
            rw.replace(node, new)
    return rw.finish()


def _ints(rw: Rewriter, node: Node, index: int) -> list[int] | None:
    name = node.inputs[index] if len(node.inputs) > index else ""
    return [int(v) for v in rw.const(name).ravel()] if name else None


def _slice(rw: Rewriter, node: Node) -> list[Node] | None:
    shape = rw.tensor(node.inputs[0]).shape
    starts, ends = _ints(rw, node, 1), _ints(rw, node, 2)
    axes = _ints(rw, node, 3) or list(range(len(starts)))
    steps = _ints(rw, node, 4) or [1] * len(starts)
    attrs = {"starts": [0] * len(shape), "ends": list(shape), "steps": [1] * len(shape)}
    for s, e, a, st in zip(starts, ends, axes, steps):
        a %= len(shape)
        attrs["starts"][a], attrs["ends"][a], attrs["steps"][a] = slice(s, e, st).indices(shape[a])
    if min(attrs["ends"]) < 0:
        return None  # a backward slice through index 0 has no end index in kernel `slice` terms
    return [node.copy(op="slice", inputs=node.inputs[:1], attrs=attrs)]


def _split(rw: Rewriter, node: Node) -> list[Node]:
    ins = [rw.tensor(i) if i else None for i in node.inputs]
    attrs = {"axis": node.attrs.get("axis", 0) % len(ins[0].shape), "sizes": split_sizes(node, ins)}
    return [node.copy(op="split", inputs=node.inputs[:1], attrs=attrs)]


def _pad(rw: Rewriter, node: Node) -> list[Node]:
    x = rw.tensor(node.inputs[0])
    rank, pads = len(x.shape), _ints(rw, node, 1)
    axes = [a % rank for a in (_ints(rw, node, 3) or range(rank))]
    full = [0] * (2 * rank)
    for i, a in enumerate(axes):
        full[a], full[a + rank] = pads[i], pads[i + len(axes)]
    value = float(rw.const(node.inputs[2]).ravel()[0]) if len(node.inputs) > 2 and node.inputs[2] else 0.0
    if min(full) >= 0:
        return [node.copy(op="pad", inputs=[x.name], attrs={"pads": full, "value": value})]
    begins = [max(-p, 0) for p in full[:rank]]
    ends = [d - max(-p, 0) for d, p in zip(x.shape, full[rank:])]
    cropped = rw.tensor_like(f"{node.outputs[0]}/cropped", tuple(e - b for b, e in zip(begins, ends)), x.dtype, x.quant)
    crop = rw.node(f"{node.name}/crop", "slice", [x.name], [cropped], {"starts": begins, "ends": ends, "steps": [1] * rank}, node)
    grow = node.copy(op="pad", inputs=[cropped], attrs={"pads": [max(p, 0) for p in full], "value": value})
    return [crop, grow]


def _gather(rw: Rewriter, node: Node) -> list[Node] | None:
    x, y = rw.tensor(node.inputs[0]), rw.tensor(node.outputs[0])
    axis = node.attrs.get("axis", 0) % len(x.shape)
    raw = rw.const(node.inputs[1])
    if raw.ndim > 1 or raw.size == 0:
        return None
    index = [int(i) % x.shape[axis] for i in raw.ravel()]

    def window(start: int, stop: int, step: int) -> dict:
        starts, ends, steps = [0] * len(x.shape), list(x.shape), [1] * len(x.shape)
        starts[axis], ends[axis], steps[axis] = start, stop, step
        return {"starts": starts, "ends": ends, "steps": steps}

    picked = x.shape[:axis] + (len(index),) + x.shape[axis + 1 :]
    out = y.name if raw.ndim == 1 else rw.tensor_like(f"{y.name}/picked", picked, x.dtype, y.quant)
    step = index[1] - index[0] if len(index) > 1 else 1
    if step > 0 and index == list(range(index[0], index[0] + step * len(index), step)):
        nodes = [node.copy(op="slice", inputs=[x.name], outputs=[out], attrs=window(index[0], index[-1] + 1, step))]
    else:
        one = x.shape[:axis] + (1,) + x.shape[axis + 1 :]
        parts = [rw.tensor_like(f"{y.name}/{k}", one, x.dtype, y.quant) for k in range(len(index))]
        nodes = [rw.node(f"{node.name}/{k}", "slice", [x.name], [p], window(i, i + 1, 1), node) for k, (i, p) in enumerate(zip(index, parts))]
        nodes.append(node.copy(op="concat", inputs=parts, outputs=[out], attrs={"axis": axis}))
    if raw.ndim == 0:
        nodes.append(rw.node(f"{node.name}/squeeze", "reshape", [out], [y.name], {"shape": list(y.shape)}, node))
    return nodes


LOWER = {"Slice": _slice, "Split": _split, "Pad": _pad, "Gather": _gather}
