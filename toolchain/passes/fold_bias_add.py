"""An add of a constant per-channel vector after a conv, depthwise conv or fully connected layer becomes its bias.

ONNX exporters write a linear layer on [N, ..., F] inputs as MatMul then Add
(bias); left as two ops, the layer's output is quantized before the bias is
added, and the add rounds again. Folded, the bias joins the int32
accumulator. The add's constant must broadcast along the output channels
only, the layer's output must be read by the add alone, the layer must have
no fused activation yet (the add comes after it), and neither carries QDQ
parameters (a source's quantized bias and output stay as given).
"""
from __future__ import annotations

import numpy as np

from toolchain.ir.graph import Graph
from toolchain.passes.rewrite import INF, Rewriter, act_range

LAYERS = frozenset({"conv2d", "depthwise_conv2d", "fully_connected"})


def run(graph: Graph) -> tuple[Graph, bool]:
    rw = Rewriter(graph)
    for add in rw.walk():
        if add.op != "add":
            continue
        for a, b in (add.inputs, add.inputs[::-1]):
            layer, shift = rw.producer(a), rw.const(b)
            if layer is None or layer.op not in LAYERS or shift is None or not rw.only_user(a, add):
                continue
            channels = rw.tensor(a).shape[-1]
            vector = _per_channel(shift, rw.tensor(a).shape)
            if vector is None or act_range(layer) != (-INF, INF) or _quantized(rw, layer, add):
                continue
            old = layer.inputs[2] if len(layer.inputs) > 2 and layer.inputs[2] else ""
            total = (rw.const(old).astype(np.float64) if old else np.zeros(channels)) + vector
            bias = rw.constant(f"{layer.name}/bias", total.astype(np.float32))
            inputs = (layer.inputs + [""] * 3)[:2] + [bias]
            attrs = {**layer.attrs, "act_min": add.attrs.get("act_min", -INF), "act_max": add.attrs.get("act_max", INF)}
            rw.replace(layer, [layer.copy(inputs=inputs, outputs=list(add.outputs), attrs=attrs)])
            rw.remove(add)
            break
    return rw.finish()


def _per_channel(value: np.ndarray, shape: tuple[int, ...]) -> np.ndarray | None:
    """The per-output-channel vector a constant broadcasts as over `shape`, or None if it varies elsewhere."""
    if value.ndim > len(shape) or any(d != 1 for d in value.shape[:-1]) or (value.shape and value.shape[-1] not in (1, shape[-1])):
        return None
    return np.broadcast_to(np.asarray(value, np.float64).reshape(-1), (shape[-1],))


def _quantized(rw: Rewriter, layer, add) -> bool:
    names = [n for n in layer.inputs[2:] + layer.outputs + add.outputs if n]
    return any(rw.tensor(n).quant is not None for n in names)
