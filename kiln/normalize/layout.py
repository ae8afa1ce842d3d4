"""NCHW <-> NHWC helpers for the passes that bring channel-first ops to kernel form.

A channel-first op is rewritten in place as transpose(NCHW -> NHWC), the
kernel op, transpose(NHWC -> NCHW), so its readers and result are unchanged.
`sink_transposes` and `cancel_transposes` then remove the transposes between
consecutive kernel ops, leaving them only where the model interface or an
op without a layout-free form needs them.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from kiln.ir.graph import Node
from kiln.normalize.rewrite import Rewriter, transpose_quant

TO_NHWC = [0, 2, 3, 1]
TO_NCHW = [0, 3, 1, 2]
OHWI = [0, 2, 3, 1]  # from OIHW
DEPTHWISE = [1, 2, 3, 0]  # from [C*m, 1, KH, KW] to [1, KH, KW, C*m]


def permuted(shape: tuple[int, ...], perm: list[int]) -> tuple[int, ...]:
    return tuple(shape[p] for p in perm)


def unit_only(shape: tuple[int, ...], perm: list[int]) -> bool:
    """Whether transposing `shape` by `perm` only moves size-1 dimensions (so it is a reshape)."""
    moved = [p for p in perm if shape[p] != 1]
    return moved == sorted(moved)


def transposed_constant(rw: Rewriter, name: str, perm: list[int], layout: str = "") -> str:
    """A new constant: `name` transposed by `perm`, its QDQ axis moved along."""
    t = rw.tensor(name)
    return rw.constant(f"{name}/{layout.lower() or 'transposed'}", np.transpose(t.data, perm), quant=transpose_quant(t.quant, perm), layout=layout)


def transpose_node(rw: Rewriter, base: str, x: str, y: str, perm: list[int], origin: Node) -> Node:
    return rw.node(base, "transpose", [x], [y], {"perm": list(perm)}, origin)


def wrap_nhwc(rw: Rewriter, node: Node, build: Callable[[str, str], list[Node]]) -> list[Node]:
    """Nodes computing `node`'s NCHW output from its NCHW input 0 through NHWC nodes `build(x_nhwc, y_nhwc)`."""
    x, y = rw.tensor(node.inputs[0]), rw.tensor(node.outputs[0])
    xt = rw.tensor_like(f"{x.name}/nhwc", permuted(x.shape, TO_NHWC), x.dtype, transpose_quant(x.quant, TO_NHWC))
    yt = rw.tensor_like(f"{y.name}/nhwc", permuted(y.shape, TO_NHWC), y.dtype, transpose_quant(y.quant, TO_NHWC))
    into = transpose_node(rw, f"{node.name}/to_nhwc", x.name, xt, TO_NHWC, node)
    back = transpose_node(rw, f"{node.name}/to_nchw", yt, y.name, TO_NCHW, node)
    return [into, *build(xt, yt), back]


def conv_attrs(node: Node) -> dict:
    """Kernel conv attributes from an ONNX 2-D Conv (ONNX pads [hb, wb, he, we] = [top, left, bottom, right])."""
    a = node.attrs
    return {
        "strides": list(a.get("strides", [1, 1])),
        "dilations": list(a.get("dilations", [1, 1])),
        "pads": list(a.get("pads", [0, 0, 0, 0])),
        "act_min": -np.inf,
        "act_max": np.inf,
    }


def is_conv2d(rw: Rewriter, node: Node) -> bool:
    """A 2-D Conv with constant weights and bias, explicit padding: what the conv rewrites accept."""
    return (
        node.op == "Conv"
        and len(rw.tensor(node.inputs[0]).shape) == 4
        and all(rw.const(i) is not None for i in node.inputs[1:] if i)
        and node.attrs.get("auto_pad", "NOTSET") == "NOTSET"
    )
