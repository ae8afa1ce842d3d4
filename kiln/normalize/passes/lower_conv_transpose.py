"""A transposed convolution whose kernel equals its stride becomes a 1x1 conv and a depth-to-space.

With kernel == stride (U-Net's 2x2 up-convolution), no padding, dilation or
output padding and one group, every output pixel (i·k + a, j·k + b) takes
input pixel (i, j) alone: it is channel (a, b, o) of a 1x1 conv whose
weights are w[c, o, a, b], rearranged into place by reshapes and a
transpose (data movement, on the conv's int8 grid). Runs in NHWC between
two transposes (see `layout`). QDQ parameters of the weights (per output
channel, or per tensor) and bias follow their channel (a, b, o). Other
transposed convolutions are left for kernel_form to report.
"""
from __future__ import annotations

import numpy as np

from kiln.ir.graph import Graph, Node, QuantParams
from kiln.normalize.layout import wrap_nhwc
from kiln.normalize.rewrite import Rewriter, no_act


def run(graph: Graph) -> tuple[Graph, bool]:
    rw = Rewriter(graph)
    for node in rw.walk():
        if node.op == "ConvTranspose" and _depth_to_space_form(rw, node):
            rw.replace(node, wrap_nhwc(rw, node, lambda x, y: _lower(rw, node, x, y)))
    return rw.finish()


def _depth_to_space_form(rw: Rewriter, node: Node) -> bool:
    a = node.attrs
    w = rw.tensor(node.inputs[1])
    consts = [rw.const(i) is not None for i in node.inputs[1:] if i]
    return (all(consts) and (w.quant is None or w.quant.axis in (None, 1)) and int(a.get("group", 1)) == 1 and list(a.get("strides", [1, 1])) == list(w.shape[2:])
            and not any(a.get("pads", [0] * 4)) and list(a.get("dilations", [1, 1])) == [1, 1] and not any(a.get("output_padding", [0, 0])))


def _tiled(q: QuantParams | None, taps: int) -> QuantParams | None:
    """Per-output-channel parameters repeated for every tap (a, b): the 1x1 conv's channel (a, b, o)."""
    if q is None or q.axis is None:
        return q
    return QuantParams(q.scale * taps, q.zero_point * taps, 0)


def _lower(rw: Rewriter, node: Node, x: str, y: str) -> list[Node]:
    w_t = rw.tensor(node.inputs[1])
    b_t = rw.tensor(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    w = w_t.data
    b = b_t.data if b_t is not None else np.zeros(w.shape[1], np.float32)
    cin, cout, kh, kw = w.shape
    n, h, wd, _ = rw.tensor(x).shape
    weights = rw.constant(f"{node.name}/weights_1x1", np.transpose(w, (2, 3, 1, 0)).reshape(kh * kw * cout, 1, 1, cin),
                          quant=_tiled(w_t.quant, kh * kw), layout="OHWI")
    bias = rw.constant(f"{node.name}/bias_1x1", np.tile(b, kh * kw).astype(np.float32), quant=_tiled(b_t.quant if b_t else None, kh * kw))
    dtype = rw.tensor(x).dtype
    pixels = rw.tensor_like(f"{y}/pixels", (n, h, wd, kh * kw * cout), dtype)
    split = rw.tensor_like(f"{y}/taps", (n, h, wd, kh, kw, cout), dtype)
    placed = rw.tensor_like(f"{y}/placed", (n, h, kh, wd, kw, cout), dtype)
    attrs = {"strides": [1, 1], "dilations": [1, 1], "pads": [0, 0, 0, 0], **no_act()}
    return [
        node.copy(op="conv2d", inputs=[x, weights, bias], outputs=[pixels], attrs=attrs),
        rw.node(f"{node.name}/taps", "reshape", [pixels], [split], {"shape": [n, h, wd, kh, kw, cout]}, node),
        rw.node(f"{node.name}/place", "transpose", [split], [placed], {"perm": [0, 1, 3, 2, 4, 5]}, node),
        rw.node(f"{node.name}/space", "reshape", [placed], [y], {"shape": [n, h * kh, wd * kw, cout]}, node),
    ]
