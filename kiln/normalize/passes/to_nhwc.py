"""Layout conversion of the channel-first ops: Conv (group 1), MaxPool, AveragePool, GlobalAveragePool, Resize.

Each becomes its NHWC kernel op between two transposes (see `layout`);
conv weights are transposed at compile time to OHWI. Pool windows in ceil
mode get extra end padding, which the kernels never count. An AveragePool
that counts its padding (count_include_pad=1) gets an explicit zero `pad`
first, since the kernel never counts padding. A nearest Resize of H and W
becomes `resize_nearest` with the source row and column of every output
position, computed by the ONNX coordinate rules at compile time.
"""
from __future__ import annotations

from kiln.ir.graph import Graph, Node
from kiln.ir.ops import pool_out
from kiln.ir.source_ops import nearest_indices, resize_plan
from kiln.normalize.layout import OHWI, conv_attrs, is_conv2d, transposed_constant, wrap_nhwc
from kiln.normalize.rewrite import Rewriter, no_act

POOLS = {"MaxPool": "max_pool2d", "AveragePool": "avg_pool2d"}


def run(graph: Graph) -> tuple[Graph, bool]:
    rw = Rewriter(graph)
    for node in rw.walk():
        rank = len(rw.tensor(node.inputs[0]).shape) if node.inputs else 0
        if is_conv2d(rw, node) and node.attrs.get("group", 1) == 1:
            w = transposed_constant(rw, node.inputs[1], OHWI, "OHWI")
            rw.replace(node, wrap_nhwc(rw, node, lambda x, y: [node.copy(op="conv2d", inputs=[x, w, *node.inputs[2:]], outputs=[y], attrs=conv_attrs(node))]))
        elif node.op == "GlobalAveragePool" and rank == 4:
            rw.replace(node, wrap_nhwc(rw, node, lambda x, y: [node.copy(op="global_avg_pool", inputs=[x], outputs=[y], attrs={})]))
        elif node.op in POOLS and rank == 4 and len(node.outputs) == 1 and list(node.attrs.get("dilations", [1, 1])) == [1, 1]:
            rw.replace(node, wrap_nhwc(rw, node, lambda x, y: _pool(rw, node, x, y)))
        elif node.op == "Resize" and rank == 4 and (attrs := _resize_attrs(rw, node)) is not None:
            rw.replace(node, wrap_nhwc(rw, node, lambda x, y: [node.copy(op="resize_nearest", inputs=[x], outputs=[y], attrs=attrs)]))
    return rw.finish()


def _resize_attrs(rw: Rewriter, node: Node) -> dict | None:
    """rows/cols of a Resize that keeps N and C, else None."""
    x = rw.tensor(node.inputs[0])
    shape, scales = resize_plan(node, [rw.tensor(i) if i else None for i in node.inputs])
    if shape[:2] != x.shape[:2]:
        return None
    mode = node.attrs.get("coordinate_transformation_mode", "half_pixel")
    nearest = node.attrs.get("nearest_mode", "round_prefer_floor")
    rows, cols = (
        list(range(shape[i])) if shape[i] == x.shape[i] and scales[i] == 1.0 else nearest_indices(x.shape[i], shape[i], scales[i], mode, nearest)
        for i in (2, 3)
    )
    return {"rows": rows, "cols": cols}


def _pool(rw: Rewriter, node: Node, x: str, y: str) -> list[Node]:
    a = node.attrs
    kernel, strides = list(a["kernel_shape"]), list(a.get("strides", [1, 1]))
    pads = list(a.get("pads", [0, 0, 0, 0]))
    size = rw.tensor(node.inputs[0]).shape[2:]
    ends = list(pads[2:])
    if a.get("ceil_mode", 0):
        for i in range(2):
            out = pool_out(size[i], kernel[i], strides[i], pads[i], pads[i + 2], 1, True)
            ends[i] = max(pads[i + 2], (out - 1) * strides[i] + kernel[i] - size[i] - pads[i])
    attrs = {"window": kernel, "strides": strides, "pads": pads[:2] + ends, **no_act()}
    if node.op == "MaxPool" or not a.get("count_include_pad", 0) or not any(pads):
        return [node.copy(op=POOLS[node.op], inputs=[x], outputs=[y], attrs=attrs)]
    xt = rw.tensor(x)
    padded_shape = (xt.shape[0], xt.shape[1] + pads[0] + pads[2], xt.shape[2] + pads[1] + pads[3], xt.shape[3])
    padded = rw.tensor_like(f"{x}/padded", padded_shape, xt.dtype, xt.quant)
    pad = rw.node(f"{node.name}/pad", "pad", [x], [padded], {"pads": [0, pads[0], pads[1], 0, 0, pads[2], pads[3], 0], "value": 0.0}, node)
    attrs["pads"] = [0, 0, ends[0] - pads[2], ends[1] - pads[3]]
    return [pad, node.copy(op="avg_pool2d", inputs=[padded], outputs=[y], attrs=attrs)]

