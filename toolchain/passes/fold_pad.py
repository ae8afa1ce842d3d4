"""Pad folding: a zero `pad` of the spatial dimensions before a conv or max pool becomes the op's own padding.

Convolutions pad with zeros, so any zero pad of H and W folds. A max pool
never counts its padding, so a zero pad folds only when the padded input
is known non-negative (it comes from an op clamped at >= 0) and every
window still covers a real element. An average pool never counts its
padding either, while the zeros of an explicit pad are counted, so a pad
before `avg_pool2d` never folds. Each reader folds on its own; the pad
stays for other readers.
"""
from __future__ import annotations

from toolchain.ir.graph import Graph, Node
from toolchain.passes.rewrite import Rewriter, act_range

CONVS = frozenset({"conv2d", "depthwise_conv2d"})


def run(graph: Graph) -> tuple[Graph, bool]:
    rw = Rewriter(graph)
    for node in rw.walk():
        pad = rw.producer(node.inputs[0]) if node.op in CONVS | {"max_pool2d"} else None
        if pad is None or pad.op != "pad" or pad.attrs.get("value", 0.0) != 0.0:
            continue
        p = pad.attrs["pads"]
        if p[0] or p[3] or p[4] or p[7] or min(p) < 0:
            continue
        pads = [a + b for a, b in zip(node.attrs.get("pads", [0, 0, 0, 0]), [p[1], p[2], p[5], p[6]])]
        if node.op == "max_pool2d" and not _max_pool_ok(rw, pad, node.attrs["kernel"], pads):
            continue
        rw.replace(node, [node.copy(inputs=[pad.inputs[0], *node.inputs[1:]], attrs={**node.attrs, "pads": pads})])
    return rw.finish()


def _max_pool_ok(rw: Rewriter, pad: Node, kernel: list[int], pads: list[int]) -> bool:
    source = rw.producer(pad.inputs[0])
    non_negative = source is not None and act_range(source)[0] >= 0.0
    return non_negative and pads[0] < kernel[0] and pads[2] < kernel[0] and pads[1] < kernel[1] and pads[3] < kernel[1]

