"""Fuse an int8 conv2d into the add or sub that alone consumes it (a residual connection's second conv).

The fused node keeps the conv's op, name, inputs and attributes, takes the
add's other operand as its fourth input (after the bias, "" when absent) and takes the add's output and place in the
schedule (the operand may be computed after the conv). The attributes
`residual` (the add's op), `residual_operand` (the conv output's position in
it), `residual_scale`/`residual_zero_point` (the conv output's quantization,
whose tensor disappears) and `residual_act_min`/`residual_act_max` (the add's
activation) let the lower stage bind kiln_conv2d_add_s8. Only the cases that
kernel runs fast are fused: operands of one shape, an add whose arithmetic
fits its table, and a conv whose scratch fits `kernels.scratch_limit`.
"""
from __future__ import annotations

import math

from kiln.ir.graph import Graph, Node
from kiln.lower.common import qparams
from kiln.lower.specialize import add_table, conv_add_scratch
from kiln.numerics.params import add_params


def run(graph: Graph, scratch_limit: int) -> tuple[Graph, bool]:
    g = graph.copy()
    consumers = g.consumers()
    fused: dict[str, Node] = {}  # add's name -> the fused node that replaces it
    dropped: set[str] = set()
    for conv in g.nodes:
        add = _fusable_add(g, conv, consumers, scratch_limit)
        if add is None or add.name in fused:  # an add of two convs takes the first
            continue
        operand = add.inputs.index(conv.outputs[0])
        scale, zp = qparams(g.tensors[conv.outputs[0]], "conv output")
        attrs = {**conv.attrs, "residual": add.op, "residual_operand": operand, "residual_scale": scale,
                 "residual_zero_point": zp, "residual_act_min": float(add.attrs.get("act_min", -math.inf)),
                 "residual_act_max": float(add.attrs.get("act_max", math.inf))}
        inputs = (conv.inputs + ["", ""])[:3] + [add.inputs[1 - operand]]  # an absent bias stays in its place
        fused[add.name] = conv.copy(inputs=inputs, outputs=list(add.outputs), attrs=attrs)
        dropped.add(conv.name)
    if not fused:
        return g, False
    g.nodes = [fused.get(n.name, n) for n in g.nodes if n.name not in dropped]
    g.remove_unused_tensors()
    return g, True


def _fusable_add(g: Graph, conv: Node, consumers: dict[str, list[Node]], scratch_limit: int) -> Node | None:
    y = conv.outputs[0]
    users = consumers.get(y, [])
    if conv.op != "conv2d" or g.tensors[conv.inputs[0]].dtype != "int8" or len(users) != 1 or y in g.outputs:
        return None
    add = users[0]
    if add.op not in ("add", "sub") or len(add.inputs) != 2 or add.inputs[0] == add.inputs[1]:
        return None
    a, b, out = (g.tensors[n] for n in (*add.inputs, add.outputs[0]))
    if not a.shape == b.shape == out.shape or a.dtype != "int8":
        return None
    w = g.tensors[conv.inputs[1]].shape
    if not conv_add_scratch(w[1] * w[2] * w[3], w[0], scratch_limit):
        return None
    try:
        params = add_params(qparams(a, "input a"), qparams(b, "input b"), qparams(out, "output"))
    except ValueError:
        return None  # the add's own lowering names the problem
    return add if add_table(params, add.op == "sub") is not None else None
