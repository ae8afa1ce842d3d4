"""LRN (local response normalization across channels) as int8-ready kernel ops, in NHWC between two transposes.

y = x * (bias + alpha / size * s)^-beta, s the sum of x² over `size`
neighbouring channels. Squares come from a `mul`; the channel window sum is
a `conv2d` with all-one weights on a view of the NHWC data as
[1, N*H*W, C, 1], where the channels are the width (zero padding is ONNX's
window clipped at the ends); a `lrn_scale` applies the rest of the formula
elementwise (an int8 table), and a `mul` the result. In int8 every one of
them is an existing kernel, the sum keeps its own range (bias and alpha are
applied inside the table, in float), and the power needs no fixed-point
approximation; see docs/normalize.md.
"""
from __future__ import annotations

import numpy as np

from kiln.ir.graph import Graph, Node
from kiln.normalize.layout import wrap_nhwc
from kiln.normalize.rewrite import Rewriter, no_act


def run(graph: Graph) -> tuple[Graph, bool]:
    rw = Rewriter(graph)
    for node in rw.walk():
        if node.op == "LRN" and len(rw.tensor(node.inputs[0]).shape) == 4:
            rw.replace(node, wrap_nhwc(rw, node, lambda x, y: _lrn(rw, node, x, y)))
    return rw.finish()


def _lrn(rw: Rewriter, node: Node, x: str, y: str) -> list[Node]:
    t = rw.tensor(x)
    n, h, w, c = t.shape
    size = int(node.attrs["size"])
    rows = (1, n * h * w, c, 1)
    squares = rw.tensor_like(f"{y}/squares", t.shape, t.dtype)
    flat = rw.tensor_like(f"{y}/squares_rows", rows, t.dtype)
    sums = rw.tensor_like(f"{y}/window_rows", rows, t.dtype)
    window = rw.tensor_like(f"{y}/window", t.shape, t.dtype)
    scale = rw.tensor_like(f"{y}/scale", t.shape, t.dtype)
    ones = rw.constant(f"{node.name}/window_weights", np.ones((1, 1, size, 1), np.float32), layout="OHWI")
    conv = {"strides": [1, 1], "dilations": [1, 1], "pads": [0, (size - 1) // 2, 0, size // 2], **no_act()}
    attrs = {"bias": float(node.attrs["bias"]), "alpha_over_size": float(node.attrs["alpha"]) / size, "beta": float(node.attrs["beta"])}
    return [
        rw.node(f"{node.name}/square", "mul", [x, x], [squares], no_act(), node),
        rw.node(f"{node.name}/rows", "reshape", [squares], [flat], {"shape": list(rows)}, node),
        rw.node(f"{node.name}/window", "conv2d", [flat, ones], [sums], conv, node),
        rw.node(f"{node.name}/unrows", "reshape", [sums], [window], {"shape": list(t.shape)}, node),
        rw.node(f"{node.name}/scale", "lrn_scale", [window], [scale], attrs, node),
        node.copy(op="mul", inputs=[x, scale], outputs=[y], attrs=no_act()),
    ]
