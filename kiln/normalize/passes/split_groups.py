"""Grouped convolution (1 < group < in_channels) as `split`, one `conv2d` per group, `concat`.

Runs in NHWC between two transposes (see `layout`); each group gets its
slice of the OHWI weights and bias, with the slice of any QDQ scales.
"""
from __future__ import annotations

import numpy as np

from kiln.ir.graph import Graph, Node, QuantParams
from kiln.normalize.layout import OHWI, conv_attrs, is_conv2d, wrap_nhwc
from kiln.normalize.rewrite import Rewriter, transpose_quant


def run(graph: Graph) -> tuple[Graph, bool]:
    rw = Rewriter(graph)
    for node in rw.walk():
        group = node.attrs.get("group", 1)
        if is_conv2d(rw, node) and 1 < group < rw.tensor(node.inputs[0]).shape[1]:
            rw.replace(node, wrap_nhwc(rw, node, lambda x, y: _groups(rw, node, group, x, y)))
    return rw.finish()


def _slice_quant(q: QuantParams | None, lo: int, hi: int) -> QuantParams | None:
    if q is None or q.axis != 0:
        return q
    return QuantParams(q.scale[lo:hi], q.zero_point[lo:hi], 0)


def _groups(rw: Rewriter, node: Node, group: int, x: str, y: str) -> list[Node]:
    w = rw.tensor(node.inputs[1])
    b = rw.tensor(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    xt, yt = rw.tensor(x), rw.tensor(y)
    cin, cout = xt.shape[3] // group, w.shape[0] // group
    parts = [rw.tensor_like(f"{x}/group{i}", xt.shape[:3] + (cin,), xt.dtype, xt.quant) for i in range(group)]
    outs = [rw.tensor_like(f"{y}/group{i}", yt.shape[:3] + (cout,), yt.dtype, yt.quant) for i in range(group)]
    nodes = [rw.node(f"{node.name}/split", "split", [x], parts, {"axis": 3, "sizes": [cin] * group}, node)]
    wq = transpose_quant(w.quant, OHWI)
    for i in range(group):
        lo, hi = i * cout, (i + 1) * cout
        inputs = [parts[i], rw.constant(f"{w.name}/ohwi_group{i}", np.transpose(w.data[lo:hi], OHWI), quant=_slice_quant(wq, lo, hi), layout="OHWI")]
        if b is not None:
            inputs.append(rw.constant(f"{b.name}/group{i}", b.data[lo:hi], quant=_slice_quant(b.quant, lo, hi)))
        nodes.append(rw.node(f"{node.name}/group{i}", "conv2d", inputs, [outs[i]], conv_attrs(node), node))
    nodes.append(node.copy(op="concat", inputs=outs, outputs=[y], attrs={"axis": 3}))
    return nodes
