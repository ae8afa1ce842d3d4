"""The machinery ATen handlers build source nodes with: emitter, argument binding, registry.

A handler reads the node's arguments by schema name and emits one or more
source nodes through the `Emitter`; it raises `Unsupported` with a reason
when the op's arguments fall outside what Kiln supports, so the frontend
can list every problem at once.
"""
from __future__ import annotations

import operator
import re
from typing import Any, Callable

import numpy as np
import torch
import torch.fx

from kiln.ir.graph import DTYPES, Graph, Node, Tensor
from kiln.ir.ops import OPS, OpError

# IR dtype of each torch dtype Kiln imports; wider or narrower floats become float32.
TORCH_DTYPES: dict[torch.dtype, str] = {
    torch.float32: "float32", torch.float64: "float32", torch.float16: "float32", torch.bfloat16: "float32",
    torch.int64: "int64", torch.int32: "int32", torch.int8: "int8", torch.uint8: "uint8", torch.bool: "bool",
}


def tensor_data(value: torch.Tensor) -> tuple[np.ndarray, str]:
    """A torch tensor's values as a NumPy array of its IR dtype (which must be in TORCH_DTYPES)."""
    dtype = TORCH_DTYPES[value.dtype]
    return np.array(value.detach().to(torch.float32 if dtype == "float32" else value.dtype).contiguous().numpy()), dtype


class Unsupported(Exception):
    """An op (or an argument of it) that Kiln cannot import; the message is the reason."""


class Emitter:
    """Builds source nodes for one FX node at a time, with stable names derived from it."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.values: dict[str, list[str]] = {}  # FX node name -> tensor name per output ("" if not produced)
        self.fx: torch.fx.Node | None = None
        self.source = ""
        self.source_name = ""

    def begin(self, fx: torch.fx.Node, source: str) -> None:
        """Emit for `fx` next: its nodes carry `source` and its layer's name (`module_path`, else the FX name)."""
        self.fx, self.source, self.source_name = fx, source, module_path(fx) or fx.name

    # -- operands ------------------------------------------------------------
    def tensor(self, value: Any) -> str:
        if not isinstance(value, torch.fx.Node):
            raise Unsupported(f"expected a tensor operand, got {value!r}")
        names = self.values.get(value.name)
        if not names or not names[0]:
            raise Unsupported(f"operand {value.name!r} is not available")
        return names[0]

    def operand(self, value: Any, dtype: str, hint: str) -> str:
        """A tensor or Python scalar as a tensor of `dtype` (torch's type promotion made explicit)."""
        if isinstance(value, torch.fx.Node):
            name = self.tensor(value)
            if self.graph.tensors[name].dtype != dtype:
                return self.step("Cast", [name], {"to": dtype}, f"{hint}_cast")
            return name
        if isinstance(value, (bool, int, float)):
            return self.const(hint, np.asarray(value, DTYPES[dtype]))
        raise Unsupported(f"unsupported operand {value!r}")

    def const(self, hint: str, data: np.ndarray) -> str:
        return self.graph.add_constant(f"{self.fx.name}_{hint}", data).name

    def const_from(self, value: torch.Tensor) -> str:
        """A torch tensor computed at import time as a constant named after the FX node."""
        if value.dtype not in TORCH_DTYPES:
            raise Unsupported(f"constant of unsupported dtype {value.dtype}")
        return self.graph.add_constant(self.fx.name, *tensor_data(value)).name

    def ints(self, hint: str, values: list[int]) -> str:
        return self.const(hint, np.asarray(values, np.int64))

    def shape(self, value: Any) -> tuple[int, ...]:
        return self.graph.tensors[self.tensor(value)].shape

    def out_dtype(self) -> str:
        """The IR dtype of the FX node's (first) output: what torch's type promotion chose."""
        dtype = _meta(self.fx)[0].dtype
        if dtype not in TORCH_DTYPES:
            raise Unsupported(f"result dtype {dtype} is not supported")
        return TORCH_DTYPES[dtype]

    # -- nodes -------------------------------------------------------------
    def step(self, op: str, inputs: list[str], attrs: dict[str, Any], hint: str) -> str:
        """An intermediate node of a multi-node mapping; its shape comes from the op's inference."""
        name = f"{self.fx.name}_{hint}"
        node = Node(self.graph.unique_node_name(name), op, inputs, [], dict(attrs), self.source, self.source_name)
        ins = [self.graph.tensors[i] if i else None for i in inputs]
        try:
            ((shape, dtype),) = OPS[op].infer(node, ins)
        except OpError as exc:
            raise Unsupported(str(exc)) from None
        out = self.graph.add_tensor(Tensor(self.graph.unique_tensor_name(name), shape, dtype)).name
        node.outputs = [out]
        self.graph.nodes.append(node)
        return out

    def finish(self, op: str, inputs: list[str], attrs: dict[str, Any] | None = None, count: int = 1) -> None:
        """The node standing for the FX node: its first `count` outputs, shaped as torch traced them."""
        vals = _meta(self.fx)
        names = _output_names(self.fx, len(vals))
        outs = []
        for i in range(count):
            what = f"output {i} of {self.fx.name!r}"
            if any(not isinstance(d, int) for d in vals[i].shape):
                raise Unsupported(f"{what} has a dynamic shape")
            if vals[i].dtype not in TORCH_DTYPES:
                raise Unsupported(f"{what} has unsupported dtype {vals[i].dtype}")
            shape, dtype = tuple(vals[i].shape), TORCH_DTYPES[vals[i].dtype]
            outs.append(self.graph.add_tensor(Tensor(self.graph.unique_tensor_name(names[i]), shape, dtype)).name)
        node = Node(self.graph.unique_node_name(self.fx.name), op, inputs, outs, dict(attrs or {}), self.source, self.source_name)
        self.graph.nodes.append(node)
        self.values[self.fx.name] = outs + [""] * (len(vals) - count)

    def alias(self, names: list[str]) -> None:
        self.values[self.fx.name] = names


def module_path(fx: torch.fx.Node) -> str:
    """The qualified name of the innermost module whose forward() ran `fx` (`features.3.conv`), as torch.export
    records it, with its `@k` when that module is called more than once ("" for the top-level forward)."""
    stack = fx.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    key, value = list(stack.items())[-1]
    path = value[0] if isinstance(value, (tuple, list)) else ""
    call = re.search(r"@\d+$", str(key))
    return f"{path}{call.group(0)}" if path and call else path


def _meta(fx: torch.fx.Node) -> list[Any]:
    val = fx.meta.get("val")
    return list(val) if isinstance(val, (list, tuple)) else [val]


def _output_names(fx: torch.fx.Node, count: int) -> list[str]:
    """Output tensor names: a multi-output op's outputs take the names of the getitem nodes that read them."""
    if count == 1:
        return [fx.name]
    names = [f"{fx.name}_{i}" for i in range(count)]
    for user in fx.users:
        if user.target is operator.getitem:
            names[user.args[1]] = user.name
    return names


def bind(fx: torch.fx.Node) -> dict[str, Any]:
    """The node's arguments by schema name, defaults filled in."""
    args = {}
    for i, arg in enumerate(fx.target._schema.arguments):
        if i < len(fx.args):
            args[arg.name] = fx.args[i]
        elif arg.name in fx.kwargs:
            args[arg.name] = fx.kwargs[arg.name]
        else:
            args[arg.name] = arg.default_value if arg.has_default_value() else None
    return args


Handler = Callable[[Emitter, torch.fx.Node], None]
HANDLERS: dict[str, Handler] = {}


def aten(*names: str) -> Callable[[Callable[[Emitter, dict[str, Any]], None]], Callable[[Emitter, dict[str, Any]], None]]:
    """Register a handler fn(emitter, args-by-name) for the ATen overloads `names` (e.g. "relu.default")."""

    def register(fn: Callable[[Emitter, dict[str, Any]], None]) -> Callable[[Emitter, dict[str, Any]], None]:
        for name in names:
            HANDLERS[f"aten.{name}"] = lambda e, fx, fn=fn: fn(e, bind(fx))
        return fn

    return register


def _getitem(e: Emitter, fx: torch.fx.Node) -> None:
    source, index = fx.args
    name = e.values[source.name][index]
    if not name:
        raise Unsupported(f"output {index} of {source.name!r} is not supported (only its first output is)")
    e.alias([name])


HANDLERS["getitem"] = _getitem


def _no_output(e: Emitter, fx: torch.fx.Node) -> None:
    """Runtime assertions torch inserts; static shapes and dtypes make them moot."""
    e.alias([])


HANDLERS["aten._assert_tensor_metadata.default"] = _no_output
