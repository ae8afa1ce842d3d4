"""The conversion state: ONNX names to Kiln tensors, node emission and constant folding.

Constants live as NumPy arrays (any dtype) until an emitted node uses them, so
initializers that only feed folded shape arithmetic or Q/DQ parameters never
reach the graph. A node whose inputs are all constant is evaluated with the
float reference at once instead of being emitted: shape subgraphs
(Shape→Gather→Unsqueeze→Concat→Reshape) become constants at import.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from kiln.errors import node_context
from kiln.ir.graph import DTYPES, Graph, Node, QuantParams, Tensor, dtype_name
from kiln.ir.ops import OPS, OpError
from kiln.reference import source_ops  # noqa: F401  (registers the source-op implementations)
from kiln.reference.impls import FLOAT_IMPLS


class Unsupported(Exception):
    """A node Kiln cannot import; the message is the reason, one line."""


@dataclass
class OnnxNode:
    """One ONNX node with its stable Kiln name and decoded attributes."""

    index: int
    name: str
    proto: onnx.NodeProto
    attrs: dict[str, Any]

    @property
    def op_type(self) -> str:
        return self.proto.op_type

    @property
    def inputs(self) -> list[str]:
        return list(self.proto.input)

    @property
    def outputs(self) -> list[str]:
        """Outputs without trailing absent ones (ONNX marks an unused optional output with "")."""
        outs = list(self.proto.output)
        while outs and not outs[-1]:
            outs.pop()
        return outs

    @property
    def where(self) -> str:
        return node_context(self.index, self.name, self.op_type)


@dataclass(frozen=True)
class PendingQuantize:
    """A QuantizeLinear output, waiting for the DequantizeLinear that undoes it."""

    source: str
    scale: np.ndarray
    zero_point: np.ndarray
    axis: int


@dataclass
class Converter:
    graph: Graph
    opset: int
    reserved: set[str]
    values: dict[str, np.ndarray] = field(default_factory=dict)
    quant: dict[str, QuantParams] = field(default_factory=dict)
    alias: dict[str, str] = field(default_factory=dict)
    pending: dict[str, PendingQuantize] = field(default_factory=dict)
    clamped: set[str] = field(default_factory=set)  # run-time tensors known to lie inside their quantization range
    layer: str = ""  # the name of the ONNX node being converted: the source name of every node it becomes

    # -- names and values --------------------------------------------------
    def resolve(self, name: str) -> str:
        """The tensor an ONNX name stands for (a folded Q/DQ pair aliases its output to its input)."""
        return self.alias.get(name, name)

    def value(self, name: str) -> np.ndarray | None:
        return self.values.get(self.resolve(name))

    def is_const(self, name: str) -> bool:
        return not name or self.resolve(name) in self.values

    def fresh(self, base: str) -> str:
        """A tensor or node name no ONNX name and no earlier generated name uses."""
        name, i = base, 1
        while name in self.reserved or name in self.graph.tensors or name in self.values:
            name, i = f"{base}_{i}", i + 1
        self.reserved.add(name)
        return name

    def const(self, base: str, data: Any, dtype: str) -> str:
        """Add a generated constant (an attribute of an old opset that is an input today)."""
        name = self.fresh(base)
        self.values[name] = np.asarray(data, DTYPES[dtype])
        return name

    def tensor(self, name: str) -> Tensor:
        """The Kiln tensor for ONNX `name`; constants get a detached tensor view."""
        if name in self.pending:
            raise Unsupported(f"uses QuantizeLinear output {name!r} directly (only QuantizeLinear→DequantizeLinear pairs are supported)")
        key = self.resolve(name)
        if key in self.graph.tensors:
            return self.graph.tensors[key]
        if key not in self.values:
            raise Unsupported(f"input {name!r} is not defined before use")
        data = self.values[key]
        try:
            dtype = dtype_name(data.dtype)
        except ValueError:
            raise Unsupported(f"tensor {name!r} has dtype {data.dtype}, which Kiln does not support") from None
        return Tensor(key, data.shape, dtype, quant=self.quant.get(key), data=data)

    # -- emission ------------------------------------------------------------
    def emit(self, op: str, inputs: list[str], outputs: list[str], attrs: dict[str, Any], name: str) -> None:
        """Add a Kiln node, or, when every input is constant, evaluate it into constants."""
        while inputs and not inputs[-1]:
            inputs = inputs[:-1]
        ins = [self.tensor(i) if i else None for i in inputs]
        opdef = OPS[op]
        if ins and ins[0] is not None and ins[0].dtype not in opdef.dtypes:
            raise Unsupported(f"input dtype {ins[0].dtype} (Kiln's {op} takes {', '.join(sorted(opdef.dtypes))})")
        node = Node(name, op, [self.resolve(i) if i else "" for i in inputs], list(outputs), attrs, source_name=self.layer)
        try:
            inferred = opdef.infer(node, ins)
        except OpError as exc:
            raise Unsupported(str(exc)) from None
        if all(t is None or t.is_constant for t in ins):
            arrays = FLOAT_IMPLS[op](node, [None if t is None else t.data for t in ins])
            for out, (shape, dtype), arr in zip(outputs, inferred, arrays):
                self.values[out] = np.asarray(arr).astype(DTYPES[dtype], copy=False).reshape(shape)
            return
        _check_int8(ins, inferred)
        for t in ins:
            if t is not None and t.is_constant and t.name not in self.graph.tensors:
                self.graph.add_tensor(t)
        for out, (shape, dtype) in zip(outputs, inferred):
            self.graph.add_tensor(Tensor(out, shape, dtype))
        self.graph.nodes.append(node)

    def sub_name(self, n: OnnxNode, suffix: str) -> str:
        """Name of the extra nodes one ONNX node expands to."""
        return self.fresh(f"{n.name}/{suffix}")


def _check_int8(ins: list[Tensor | None], inferred: list[tuple[tuple[int, ...], str]]) -> None:
    """The IR requires quantization parameters on int8 tensors; a float source only has them from DequantizeLinear."""
    for t in ins:
        if t is not None and t.dtype == "int8" and t.quant is None:
            raise Unsupported(f"int8 tensor {t.name!r} without quantization parameters (int8 data must come through DequantizeLinear)")
    if any(dtype == "int8" for _, dtype in inferred):
        raise Unsupported("produces an int8 tensor without quantization parameters")
