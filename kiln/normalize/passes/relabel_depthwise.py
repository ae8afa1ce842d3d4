"""Depthwise relabel: a 2-D Conv with group == in_channels becomes `depthwise_conv2d`.

Weights [C*m, 1, KH, KW] are transposed at compile time to [1, KH, KW, C*m]
(QDQ axis 0 becomes 3) and depth_multiplier = m; the op runs in NHWC
between two transposes (see `layout`).
"""
from __future__ import annotations

from kiln.ir.graph import Graph
from kiln.normalize.layout import DEPTHWISE, conv_attrs, is_conv2d, transposed_constant, wrap_nhwc
from kiln.normalize.rewrite import Rewriter


def run(graph: Graph) -> tuple[Graph, bool]:
    rw = Rewriter(graph)
    for node in rw.walk():
        if not is_conv2d(rw, node):
            continue
        channels = rw.tensor(node.inputs[0]).shape[1]
        group = node.attrs.get("group", 1)
        if group != channels or group == 1:
            continue
        w = transposed_constant(rw, node.inputs[1], DEPTHWISE, "1HWC")
        attrs = {**conv_attrs(node), "depth_multiplier": rw.tensor(node.inputs[1]).shape[0] // channels}
        rw.replace(node, wrap_nhwc(rw, node, lambda x, y: [node.copy(op="depthwise_conv2d", inputs=[x, w, *node.inputs[2:]], outputs=[y], attrs=attrs)]))
    return rw.finish()
