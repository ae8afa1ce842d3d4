"""The model interface: the layout of 4-D graph inputs (model.toml `normalize.input_layout`).

"source" (the default) keeps the source's NCHW inputs: the host passes data
as PyTorch does, and the first channel-first op transposes it (a reshape when
that is equivalent, e.g. one channel). "NHWC" changes each 4-D input tensor
to NHWC, so the compiled model takes NHWC data directly: a transpose back to
NCHW is put after the input, and layout sinking cancels it against the first
op's transpose. Outputs keep the source layout either way. The choice is
recorded in the input tensors' `layout`.
"""
from __future__ import annotations

from kiln.ir.graph import Graph, Node
from kiln.normalize.layout import TO_NCHW, TO_NHWC, permuted
from kiln.normalize.rewrite import transpose_quant

LAYOUTS = ("source", "NHWC")


def apply(graph: Graph, layout: str) -> Graph:
    g = graph.copy()
    for name in g.inputs:
        t = g.tensors[name]
        if len(t.shape) != 4:
            continue
        if layout != "NHWC":
            g.tensors[name] = t.copy(layout="NCHW")
            continue
        nchw = g.unique_tensor_name(f"{name}/nchw")
        g.tensors[nchw] = t.copy(name=nchw, layout="NCHW")
        g.replace_uses(name, nchw)
        g.tensors[name] = t.copy(shape=permuted(t.shape, TO_NHWC), layout="NHWC", quant=transpose_quant(t.quant, TO_NHWC))
        g.nodes.insert(0, Node(g.unique_node_name(f"{name}/to_nchw"), "transpose", [name], [nchw], {"perm": list(TO_NCHW)}))
    for name in g.outputs:
        if len(g.tensors[name].shape) == 4 and name not in g.inputs:
            g.tensors[name] = g.tensors[name].copy(layout="NCHW")
    return g
