"""An add of a constant per-channel vector after a conv, depthwise conv or fully connected layer becomes its bias.

ONNX exporters write a linear layer on [N, ..., F] inputs as MatMul then Add
(bias), and `lower_matmul` puts that MatMul's fully connected layer between
reshapes; left as two ops, the layer's output is quantized before the bias is
added, and the add rounds again. Folded, the bias joins the int32
accumulator. The add may follow the layer directly or through one reshape
that keeps the channel (last) dimension. The add's constant must vary only
along the channels, every intermediate result must be read by the next step
alone, the layer must have no fused activation yet (the add's moves onto it),
and nothing involved carries QDQ parameters (a source's quantized bias and
output stay as given).
"""
from __future__ import annotations

import numpy as np

from kiln.ir.graph import Graph, Node
from kiln.normalize.rewrite import INF, Rewriter, act_range

LAYERS = frozenset({"conv2d", "depthwise_conv2d", "fully_connected"})


def run(graph: Graph) -> tuple[Graph, bool]:
    rw = Rewriter(graph)
    for add in rw.walk():
        if add.op != "add":
            continue
        for a, b in (add.inputs, add.inputs[::-1]):
            chain = _layer_chain(rw, add, a)
            vector = None if chain is None or rw.const(b) is None else _per_channel(rw.const(b), rw.tensor(a).shape)
            if vector is None:
                continue
            layer, view = chain
            old = layer.inputs[2] if len(layer.inputs) > 2 and layer.inputs[2] else ""
            total = (rw.const(old).astype(np.float64) if old else np.zeros(vector.shape)) + vector
            bias = rw.constant(f"{layer.name}/bias", total.astype(np.float32))
            attrs = {**layer.attrs, "act_min": add.attrs.get("act_min", -INF), "act_max": add.attrs.get("act_max", INF)}
            inputs = (layer.inputs + [""] * 3)[:2] + [bias]
            if view is None:
                rw.replace(layer, [layer.copy(inputs=inputs, outputs=list(add.outputs), attrs=attrs)])
            else:
                rw.replace(layer, [layer.copy(inputs=inputs, attrs=attrs)])
                rw.replace(view, [view.copy(outputs=list(add.outputs))])
            rw.remove(add)
            break
    return rw.finish()


def _layer_chain(rw: Rewriter, add: Node, name: str) -> tuple[Node, Node | None] | None:
    """(layer, reshape or None) when `name` is a layer's output, directly or through a channel-keeping reshape."""
    node, view = rw.producer(name), None
    if node is not None and node.op == "reshape" and rw.only_user(name, add):
        src = node.inputs[0]
        if rw.tensor(src).shape[-1:] == rw.tensor(name).shape[-1:]:
            view, add, name, node = node, node, src, rw.producer(src)
    if node is None or node.op not in LAYERS or not rw.only_user(name, add) or act_range(node) != (-INF, INF):
        return None
    names = [n for n in node.inputs[2:] + node.outputs + (view.outputs if view else []) if n]
    return None if any(rw.tensor(n).quant is not None for n in names) else (node, view)


def _per_channel(value: np.ndarray, shape: tuple[int, ...]) -> np.ndarray | None:
    """The per-output-channel vector a constant broadcasts as over `shape`, or None if it varies elsewhere."""
    if value.ndim > len(shape) or any(d != 1 for d in value.shape[:-1]) or (value.shape and value.shape[-1] not in (1, shape[-1])):
        return None
    return np.broadcast_to(np.asarray(value, np.float64).reshape(-1), (shape[-1],))
