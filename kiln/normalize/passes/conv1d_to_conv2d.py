"""1-D Conv / MaxPool / AveragePool / GlobalAveragePool as their 2-D forms with height 1.

x [N, C, L] is reshaped to [N, C, 1, L], the op gets a leading spatial
dimension of size 1 (kernel 1, stride 1, no padding), Conv weights
[O, I, K] become constants [O, I, 1, K] (QDQ axis kept), and the result is
reshaped back to [N, C', L'].
"""
from __future__ import annotations

from kiln.ir.graph import Graph, Node
from kiln.normalize.rewrite import Rewriter, reshape_quant

OPS = frozenset({"Conv", "MaxPool", "AveragePool", "GlobalAveragePool"})


def run(graph: Graph) -> tuple[Graph, bool]:
    rw = Rewriter(graph)
    for node in rw.walk():
        if node.op not in OPS or len(rw.tensor(node.inputs[0]).shape) != 3 or len(node.outputs) != 1:
            continue
        inputs = list(node.inputs)
        if node.op == "Conv":
            w = rw.tensor(node.inputs[1])
            if w.data is None:
                continue
            shape = (w.shape[0], w.shape[1], 1, w.shape[2])
            inputs[1] = rw.constant(f"{w.name}/2d", w.data.reshape(shape), quant=reshape_quant(w.quant, w.shape, shape))
        x, y = rw.tensor(node.inputs[0]), rw.tensor(node.outputs[0])
        x2 = rw.tensor_like(f"{x.name}/2d", (x.shape[0], x.shape[1], 1, x.shape[2]), x.dtype, reshape_quant(x.quant, x.shape, x.shape[:2] + (1,) + x.shape[2:]))
        y2 = rw.tensor_like(f"{y.name}/2d", (y.shape[0], y.shape[1], 1, y.shape[2]), y.dtype, reshape_quant(y.quant, y.shape, y.shape[:2] + (1,) + y.shape[2:]))
        up = rw.node(f"{node.name}/to_2d", "reshape", [x.name], [x2], {"shape": list(rw.tensor(x2).shape)}, node)
        down = rw.node(f"{node.name}/to_1d", "reshape", [y2], [y.name], {"shape": list(y.shape)}, node)
        rw.replace(node, [up, node.copy(inputs=[x2] + inputs[1:], outputs=[y2], attrs=_attrs_2d(node)), down])
    return rw.finish()


def _attrs_2d(node: Node) -> dict:
    a = dict(node.attrs)
    for key, unit in (("kernel_shape", 1), ("strides", 1), ("dilations", 1)):
        if key in a:
            a[key] = [unit] + list(a[key])
    if "pads" in a:
        a["pads"] = [0, a["pads"][0], 0, a["pads"][1]]
    return a
