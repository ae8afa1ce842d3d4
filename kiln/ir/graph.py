"""The Kiln IR: a graph of nodes over named tensors.

Graphs are values: a stage or pass copies the graph it is given (`Graph.copy`)
and edits the copy, so no stage mutates its input. Constant arrays are made
read-only when they enter a tensor, so copies may share them safely.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

DTYPES: dict[str, np.dtype] = {
    "float32": np.dtype(np.float32),
    "int8": np.dtype(np.int8),
    "int16": np.dtype(np.int16),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "uint8": np.dtype(np.uint8),
    "bool": np.dtype(np.bool_),
}

AttrValue = int | float | str | list[int] | list[float] | list[str]


@dataclass(frozen=True)
class QuantParams:
    """Affine quantization: real = scale * (q - zero_point), per tensor or along `axis`."""

    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    axis: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", tuple(float(np.float32(s)) for s in self.scale))
        object.__setattr__(self, "zero_point", tuple(int(z) for z in self.zero_point))

    @property
    def per_channel(self) -> bool:
        return self.axis is not None


@dataclass
class Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: str
    layout: str = ""
    quant: QuantParams | None = None
    data: np.ndarray | None = None
    attrs: dict[str, AttrValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.shape = tuple(int(d) for d in self.shape)
        if self.data is not None:
            data = np.ascontiguousarray(self.data, dtype=DTYPES[self.dtype])
            if data.shape != self.shape:
                data = data.reshape(self.shape)
            data.flags.writeable = False
            self.data = data

    @property
    def is_constant(self) -> bool:
        return self.data is not None

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * DTYPES[self.dtype].itemsize

    def copy(self, **changes: Any) -> Tensor:
        """A new tensor with `changes` applied; list/dict attributes are not shared."""
        attrs = changes.pop("attrs", dict(self.attrs))
        return dataclasses.replace(self, attrs=attrs, **changes)


@dataclass
class Node:
    """One operator. `source` is the user's source text for error messages; `source_name` the layer's name in
    the source model (a PyTorch module's qualified name, an ONNX node's name, a TFLite operator's output
    tensor), written by the import stage and kept by every rewrite that stands for the same layer."""

    name: str
    op: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, AttrValue] = field(default_factory=dict)
    source: str = ""
    source_name: str = ""

    @property
    def label(self) -> str:
        """The name users see: the source's name for the layer, else the graph's own (nodes no source layer made)."""
        return self.source_name or self.name

    def copy(self, **changes: Any) -> Node:
        fields = {
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
            "attrs": {k: list(v) if isinstance(v, list) else v for k, v in self.attrs.items()},
        }
        fields.update(changes)
        return dataclasses.replace(self, **fields)


@dataclass
class Graph:
    name: str
    tensors: dict[str, Tensor] = field(default_factory=dict)
    nodes: list[Node] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    meta: dict[str, AttrValue] = field(default_factory=dict)

    def copy(self) -> Graph:
        return Graph(
            name=self.name,
            tensors={k: t.copy() for k, t in self.tensors.items()},
            nodes=[n.copy() for n in self.nodes],
            inputs=list(self.inputs),
            outputs=list(self.outputs),
            meta={k: list(v) if isinstance(v, list) else v for k, v in self.meta.items()},
        )

    # -- queries ---------------------------------------------------------
    def producers(self) -> dict[str, Node]:
        return {out: n for n in self.nodes for out in n.outputs if out}

    def consumers(self) -> dict[str, list[Node]]:
        users: dict[str, list[Node]] = {name: [] for name in self.tensors}
        for n in self.nodes:
            for i in n.inputs:
                if i:
                    users.setdefault(i, []).append(n)
        return users

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def constant(self, name: str) -> np.ndarray | None:
        t = self.tensors.get(name)
        return None if t is None else t.data

    # -- edits (on a copy) -------------------------------------------------
    def add_tensor(self, tensor: Tensor) -> Tensor:
        if tensor.name in self.tensors:
            raise ValueError(f"tensor {tensor.name!r} already exists")
        self.tensors[tensor.name] = tensor
        return tensor

    def add_constant(self, name: str, data: np.ndarray, dtype: str | None = None, **kw: Any) -> Tensor:
        arr = np.asarray(data)
        dtype = dtype or dtype_name(arr.dtype)
        return self.add_tensor(Tensor(self.unique_tensor_name(name), arr.shape, dtype, data=arr, **kw))

    def unique_tensor_name(self, base: str) -> str:
        return unique_name(base, self.tensors)

    def unique_node_name(self, base: str) -> str:
        return unique_name(base, {n.name for n in self.nodes})

    def replace_uses(self, old: str, new: str, nodes: Iterable[Node] | None = None) -> None:
        """Point every use of tensor `old` (node inputs and graph outputs) at `new`."""
        for n in self.nodes if nodes is None else nodes:
            n.inputs = [new if i == old else i for i in n.inputs]
        self.outputs = [new if o == old else o for o in self.outputs]

    def remove_unused_tensors(self) -> bool:
        used = set(self.inputs) | set(self.outputs)
        for n in self.nodes:
            used.update(n.inputs)
            used.update(n.outputs)
        dead = [k for k in self.tensors if k not in used]
        for k in dead:
            del self.tensors[k]
        return bool(dead)


def unique_name(base: str, taken: Any) -> str:
    """`base`, or the first of `base_1`, `base_2`, ... not in `taken`."""
    if base not in taken:
        return base
    i = 1
    while f"{base}_{i}" in taken:
        i += 1
    return f"{base}_{i}"


def dtype_name(dtype: np.dtype) -> str:
    """The IR name of a NumPy dtype (float64 is not an IR type: callers convert)."""
    for name, dt in DTYPES.items():
        if dt == np.dtype(dtype):
            return name
    raise ValueError(f"unsupported dtype {dtype}")
