"""What every lowering rule shares: access to the node's tensors, new constants, and bound calls."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from kiln.ir.graph import Graph, Node, QuantParams, Tensor
from kiln.lower.abi import bind
from kiln.numerics.fixedpoint import activation_range, float_bits


class Unsupported(ValueError):
    """A node whose pattern fits no kernel; the driver names the node."""


@dataclass
class Site:
    """One node being lowered, inside the graph copy that receives new constants."""

    graph: Graph
    node: Node

    def input(self, index: int) -> Tensor | None:
        name = self.node.inputs[index] if index < len(self.node.inputs) else ""
        return self.graph.tensors[name] if name else None

    def output(self, index: int = 0) -> Tensor:
        return self.graph.tensors[self.node.outputs[index]]

    @property
    def int8(self) -> bool:
        return self.graph.tensors[self.node.inputs[0]].dtype == "int8"

    def constant(self, suffix: str, data: np.ndarray, dtype: str, quant: QuantParams | None = None) -> str:
        """Add a folded constant named after the node; returns its tensor name."""
        return self.graph.add_constant(f"{self.node.name}/{suffix}", np.asarray(data), dtype, quant=quant).name

    def call(self, kernel: str, inputs: list[str], outputs: list[str] | None = None, part: int | None = None, **params: int) -> Node:
        """The node as a call of `kernel` (a numbered part when one node becomes several calls)."""
        name = self.node.name if part is None else f"{self.node.name}/part{part}"
        attrs = {**self.node.attrs, **bind(kernel, **params), **({} if part is None else {"part": part})}
        return self.node.copy(name=name, inputs=list(inputs), outputs=list(outputs or self.node.outputs), attrs=attrs)

    def alias(self) -> Node:
        """A reshape-like node: no code, the output shares the input's storage."""
        return self.node.copy(attrs={**self.node.attrs, "kernel": ""})

    def attr(self, name: str, default=None):
        return self.node.attrs.get(name, default)

    def act_bits(self) -> dict[str, int]:
        """Float fused-activation bounds as kernel parameters (±inf when absent)."""
        return {"act_min_bits": float_bits(self.attr("act_min", -math.inf)), "act_max_bits": float_bits(self.attr("act_max", math.inf))}

    def act_range(self) -> dict[str, int]:
        """int8 clamp bounds of the fused activation under the output's quantization."""
        scale, zp = qparams(self.output(), "output")
        lo, hi = activation_range(float(self.attr("act_min", -math.inf)), float(self.attr("act_max", math.inf)), scale, zp)
        return {"act_min": lo, "act_max": hi}


Rule = Callable[[Site], list[Node]]


def qparams(t: Tensor, what: str) -> tuple[float, int]:
    """The per-tensor (scale, zero point) of an int8 activation."""
    if t.quant is None or len(t.quant.scale) != 1:
        raise Unsupported(f"{what} {t.name!r} needs per-tensor quantization parameters")
    return t.quant.scale[0], t.quant.zero_point[0]


def same_quant(a: Tensor, b: Tensor) -> bool:
    return qparams(a, "input") == qparams(b, "output")


def require_same_quant(site: Site) -> None:
    """Ops whose kernel copies/compares raw int8 values need identical input and output parameters."""
    x, y = site.input(0), site.output()
    if not same_quant(x, y):
        raise Unsupported(f"input quantization {qparams(x, 'input')} differs from output {qparams(y, 'output')} "
                          "(this op keeps its input's parameters)")


def constant_data(t: Tensor | None, what: str) -> np.ndarray:
    if t is None or t.data is None:
        raise Unsupported(f"{what} must be a constant tensor")
    return t.data


def four_d(shape: tuple[int, ...], what: str) -> tuple[int, int, int, int]:
    if len(shape) != 4:
        raise Unsupported(f"{what} must be 4-D NHWC, got shape {shape}")
    return shape  # type: ignore[return-value]
