"""Kernels that may write their output over one of their inputs.

A kernel is listed only when its C implementation is element-wise over
operands of identical shape and element size and reads element i before it
writes element i, so overwriting the input as it goes never changes a later
read. Each symbol here has a test that runs it in place under AddressSanitizer
and compares with the reference; add a kernel only together with such a test.
"""
from __future__ import annotations

from kiln.ir.graph import Graph, Node

# kernel symbol -> positions of the inputs whose storage the output may take
IN_PLACE: dict[str, tuple[int, ...]] = {
    "kiln_lut_s8": (0,),
    "kiln_add_s8": (0, 1),
    "kiln_sub_s8": (0, 1),
    "kiln_mul_s8": (0, 1),
    "kiln_add_f32": (0, 1),
    "kiln_sub_f32": (0, 1),
    "kiln_mul_f32": (0, 1),
    "kiln_div_f32": (0, 1),
    "kiln_sigmoid_f32": (0,),
    "kiln_tanh_f32": (0,),
    "kiln_hardswish_f32": (0,),
    "kiln_hardsigmoid_f32": (0,),
    "kiln_silu_f32": (0,),
    "kiln_gelu_f32": (0,),
    "kiln_leaky_relu_f32": (0,),
    "kiln_clamp_f32": (0,),
}


def in_place_candidates(g: Graph, node: Node) -> list[str]:
    """The inputs of `node` whose storage its output could reuse, in preference order.

    Only shape and element size are checked here; whether the input dies at
    this node depends on the schedule and is the caller's question.
    """
    positions = IN_PLACE.get(str(node.attrs.get("kernel", "")), ())
    if len(node.outputs) != 1:
        return []
    out = g.tensors[node.outputs[0]]
    found = []
    for pos in positions:
        if pos >= len(node.inputs) or not node.inputs[pos]:
            continue
        t = g.tensors[node.inputs[pos]]
        if not t.is_constant and t.shape == out.shape and t.dtype == out.dtype and t.name not in found:
            found.append(t.name)
    return found
