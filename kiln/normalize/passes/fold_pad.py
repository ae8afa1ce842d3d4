"""Pad folding: a zero `pad` of the spatial dimensions before a conv or max pool becomes the op's own padding.

Convolutions pad with zeros, so any zero pad of H and W folds. A max pool
never counts its padding, so a zero pad folds only when the padded input
is known non-negative (it comes from an op clamped at >= 0) and every
window still covers a real element. An average pool never counts its
padding either, while the zeros of an explicit pad are counted, so a pad
before `avg_pool2d` never folds. Each reader folds on its own; the pad
stays for other readers. A zero pad of an NCHW tensor that reaches the conv
through the transpose into NHWC (a pad at a model's NCHW input) folds too:
the conv then reads the transpose of the unpadded tensor.
"""
from __future__ import annotations

from kiln.ir.graph import Graph, Node
from kiln.normalize.layout import permuted, transpose_node
from kiln.normalize.rewrite import Rewriter, act_range, transpose_quant

CONVS = frozenset({"conv2d", "depthwise_conv2d"})
TO_NHWC = [0, 2, 3, 1]


def run(graph: Graph) -> tuple[Graph, bool]:
    rw = Rewriter(graph)
    for node in rw.walk():
        found = _zero_pad(rw, node.inputs[0]) if node.op in CONVS | {"max_pool2d"} else None
        if found is None:
            continue
        pad, spatial, through_transpose = found
        pads = [a + b for a, b in zip(node.attrs.get("pads", [0, 0, 0, 0]), spatial)]
        if node.op == "max_pool2d" and not _max_pool_ok(rw, pad, node.attrs["window"], pads):
            continue
        x, new = pad.inputs[0], []
        if through_transpose:
            x, new = _nhwc(rw, x, node)
        rw.replace(node, [*new, node.copy(inputs=[x, *node.inputs[1:]], attrs={**node.attrs, "pads": pads})])
    return rw.finish()


def _zero_pad(rw: Rewriter, name: str) -> tuple[Node, list[int], bool] | None:
    """(pad, [top, left, bottom, right], through a transpose) when `name` is a zero spatial pad of an NHWC
    tensor, or the NHWC transpose of a zero spatial pad of an NCHW tensor."""
    p = rw.producer(name)
    if p is not None and p.op == "transpose" and list(p.attrs["perm"]) == TO_NHWC:
        pad = rw.producer(p.inputs[0])
        if _zero(pad, (0, 1, 4, 5)):
            q = pad.attrs["pads"]
            return pad, [q[2], q[3], q[6], q[7]], True
    if _zero(p, (0, 3, 4, 7)):
        q = p.attrs["pads"]
        return p, [q[1], q[2], q[5], q[6]], False
    return None


def _zero(pad: Node | None, unpadded: tuple[int, ...]) -> bool:
    """A 4-D zero pad with non-negative pads that leaves the `unpadded` entries (batch and channel) at 0."""
    if pad is None or pad.op != "pad" or pad.attrs.get("value", 0.0) != 0.0 or len(pad.attrs["pads"]) != 8:
        return False
    pads = pad.attrs["pads"]
    return min(pads) >= 0 and not any(pads[i] for i in unpadded)


def _nhwc(rw: Rewriter, x: str, node: Node) -> tuple[str, list[Node]]:
    """A fresh NHWC transpose of NCHW tensor `x` for `node` to read."""
    t = rw.tensor(x)
    y = rw.tensor_like(f"{x}/nhwc", permuted(t.shape, TO_NHWC), t.dtype, transpose_quant(t.quant, TO_NHWC), "NHWC")
    return y, [transpose_node(rw, f"{node.name}/to_nhwc", x, y, TO_NHWC, node)]


def _max_pool_ok(rw: Rewriter, pad: Node, kernel: list[int], pads: list[int]) -> bool:
    source = rw.producer(pad.inputs[0])
    non_negative = source is not None and act_range(source)[0] >= 0.0
    return non_negative and pads[0] < kernel[0] and pads[2] < kernel[0] and pads[1] < kernel[1] and pads[3] < kernel[1]

