"""Operator definitions: for each op, its shape/dtype inference and legal dtypes.

Two levels share one graph type:
- *source* ops carry ONNX names and ONNX semantics (NCHW, shapes as constant
  inputs); both frontends produce them.
- *kernel* ops (snake_case, NHWC, shapes as attributes, fused activations as
  `act_min`/`act_max`) are what normalization produces and what quantization,
  lowering and code generation consume.

`infer(node, inputs)` returns one (shape, dtype) per output; `inputs` holds
the input tensors (None for absent optional inputs). It raises `OpError` when
the inputs are inconsistent, which the verifier reports with the node.

This module holds what both levels share and the table `OPS`; the ops are
defined in `kiln.ir.kernel_ops` and `kiln.ir.source_ops`, which the `kiln.ir`
package imports, so the table is complete once anything of `kiln.ir` is.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from kiln.ir.graph import Node, Tensor

Shape = tuple[int, ...]
Inferred = list[tuple[Shape, str]]


class OpError(ValueError):
    """Inputs or attributes an op cannot accept."""


@dataclass(frozen=True)
class OpDef:
    name: str
    level: str  # "source" or "kernel"
    infer: Callable[[Node, list[Tensor | None]], Inferred]
    dtypes: frozenset[str]  # legal dtypes of the first input


OPS: dict[str, OpDef] = {}
FLOAT = frozenset({"float32"})
NUMERIC = frozenset({"float32", "int8", "int32", "int64"})
ANY = frozenset({"float32", "int8", "int16", "int32", "int64", "uint8", "bool"})


def op(name: str, level: str, dtypes: frozenset[str] = NUMERIC):
    def register(fn: Callable[[Node, list[Tensor | None]], Inferred]):
        OPS[name] = OpDef(name, level, fn, dtypes)
        return fn

    return register


def const_ints(t: Tensor | None, what: str) -> list[int]:
    if t is None or t.data is None:
        raise OpError(f"{what} must be a constant")
    return [int(v) for v in np.asarray(t.data).ravel()]


def broadcast(*shapes: Shape) -> Shape:
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError:
        raise OpError(f"shapes {' and '.join(map(str, shapes))} do not broadcast") from None


def norm_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise OpError(f"axis {axis} out of range for rank {rank}")
    return axis % max(rank, 1)


def pool_out(size: int, k: int, stride: int, pad_begin: int, pad_end: int, dilation: int = 1, ceil: bool = False) -> int:
    span = dilation * (k - 1) + 1
    num = size + pad_begin + pad_end - span
    if num < 0:
        raise OpError(f"window {span} larger than padded input {size + pad_begin + pad_end}")
    out = (-(-num // stride) if ceil else num // stride) + 1
    if ceil and (out - 1) * stride >= size + pad_begin:
        out -= 1  # the last window must start inside the input or its begin padding
    return out


def elementwise(node: Node, ins: list[Tensor | None]) -> Inferred:
    """Two inputs of one dtype, broadcast: add, mul and the like, at either level."""
    a, b = ins
    if a.dtype != b.dtype:
        raise OpError(f"input dtypes differ: {a.dtype} and {b.dtype}")
    return [(broadcast(a.shape, b.shape), a.dtype)]


def same_shape(node: Node, ins: list[Tensor | None]) -> Inferred:
    """The output is shaped and typed as the first input: activations, softmax."""
    return [(ins[0].shape, ins[0].dtype)]
