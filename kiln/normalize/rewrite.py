"""What every pass shares: a copy-on-write graph editor and quantization bookkeeping.

A pass builds a `Rewriter` over its input graph, walks the nodes in order and
splices replacements in place, so the node list stays a topological order and
nodes created while walking are seen by later matches. Generated names derive
from the name of the node being rewritten, so they depend only on the graph,
never on the order in which the pass happened to visit things.
"""
from __future__ import annotations

import math
from typing import Any, Iterator

import numpy as np

from kiln.ir.graph import DTYPES, Graph, Node, QuantParams, Tensor, dtype_name

INF = math.inf
# Kernel ops that carry a fused activation range (`act_min`/`act_max`).
ACT_OPS = frozenset({"conv2d", "depthwise_conv2d", "fully_connected", "batch_matmul", "add", "sub", "mul", "div", "max_pool2d", "avg_pool2d",
                     "clamp"})


def no_act() -> dict[str, float]:
    """The attributes of an op with no fused activation (explicit, so later stages need no defaults)."""
    return {"act_min": -INF, "act_max": INF}


def act_range(node: Node) -> tuple[float, float]:
    return float(node.attrs.get("act_min", -INF)), float(node.attrs.get("act_max", INF))


def inverse(perm: list[int]) -> list[int]:
    return [int(i) for i in np.argsort(perm)]


def transpose_quant(q: QuantParams | None, perm: list[int]) -> QuantParams | None:
    """Parameters of `transpose(x, perm)` given those of x: a per-channel axis moves with its dimension."""
    if q is None or q.axis is None:
        return q
    return QuantParams(q.scale, q.zero_point, list(perm).index(q.axis))


def reshape_quant(q: QuantParams | None, old: tuple[int, ...], new: tuple[int, ...]) -> QuantParams | None:
    """Parameters after a reshape: the per-channel axis follows its dimension if the reshape keeps it whole."""
    if q is None or q.axis is None:
        return q
    before = int(np.prod(old[: q.axis]))
    for axis in range(len(new)):
        if int(np.prod(new[:axis])) == before and new[axis] == old[q.axis]:
            return QuantParams(q.scale, q.zero_point, axis)
    return None


def permute_quant(q: QuantParams | None, axis: int, order: np.ndarray) -> QuantParams | None:
    """Parameters after reordering the entries of `axis` by `order` (a per-channel axis reorders its scales)."""
    if q is None or q.axis != axis:
        return q
    return QuantParams(tuple(q.scale[i] for i in order), tuple(q.zero_point[i] for i in order), axis)


class Rewriter:
    """Edits a copy of a graph; the graph it was built from is never touched."""

    def __init__(self, graph: Graph) -> None:
        self._source = graph
        self.graph = graph.copy()
        self.changed = False
        self._alive = {id(n) for n in self.graph.nodes}
        self._node_names = {n.name for n in self.graph.nodes}
        self._producers: dict[str, Node] | None = None
        self._consumers: dict[str, list[Node]] | None = None

    # -- queries -----------------------------------------------------------
    def walk(self) -> Iterator[Node]:
        """The nodes as of now, in order, skipping those removed or replaced meanwhile."""
        for node in list(self.graph.nodes):
            if id(node) in self._alive:
                yield node

    def producer(self, name: str) -> Node | None:
        if self._producers is None:
            self._producers = self.graph.producers()
        return self._producers.get(name)

    def consumers(self, name: str) -> list[Node]:
        if self._consumers is None:
            self._consumers = self.graph.consumers()
        return self._consumers.get(name, [])

    def only_user(self, name: str, node: Node) -> bool:
        """Whether `node` is the one reader of tensor `name` (and it is no graph output)."""
        users = self.consumers(name)
        return name not in self.graph.outputs and len(users) == 1 and users[0] is node

    def tensor(self, name: str) -> Tensor:
        return self.graph.tensors[name]

    def const(self, name: str) -> np.ndarray | None:
        return self.graph.constant(name) if name else None

    # -- edits -------------------------------------------------------------
    def _dirty(self) -> None:
        self.changed = True
        self._producers = self._consumers = None

    def replace(self, old: Node, new: list[Node]) -> None:
        """Put `new` (in order) where `old` was."""
        index = next(i for i, n in enumerate(self.graph.nodes) if n is old)
        self.graph.nodes[index : index + 1] = new
        self._alive.discard(id(old))
        self._alive.update(id(n) for n in new)
        self._dirty()

    def remove(self, node: Node) -> None:
        self.replace(node, [])

    def node(self, base: str, op: str, inputs: list[str], outputs: list[str], attrs: dict[str, Any], source: str = "") -> Node:
        """A new node named after `base` (unique in the graph); the caller splices it in."""
        name = base
        i = 1
        while name in self._node_names:
            name = f"{base}_{i}"
            i += 1
        self._node_names.add(name)
        return Node(name, op, inputs, outputs, attrs, source)

    def tensor_like(self, base: str, shape: tuple[int, ...], dtype: str, quant: QuantParams | None = None, layout: str = "") -> str:
        return self.graph.add_tensor(Tensor(self.graph.unique_tensor_name(base), shape, dtype, layout, quant)).name

    def constant(self, base: str, data: np.ndarray, dtype: str | None = None, quant: QuantParams | None = None, layout: str = "") -> str:
        """A constant named after `base`; an existing `base` with the same content is shared, not duplicated."""
        arr = np.asarray(data)
        dtype = dtype or dtype_name(arr.dtype)
        tensor = Tensor(base, arr.shape, dtype, layout, quant, arr.astype(DTYPES[dtype]))
        old = self.graph.tensors.get(base)
        if old is not None and old.data is not None and _same_constant(old, tensor):
            return base
        tensor.name = self.graph.unique_tensor_name(base)
        return self.graph.add_tensor(tensor).name

    def set_tensor(self, name: str, **changes: Any) -> None:
        self.graph.tensors[name] = self.graph.tensors[name].copy(**changes)
        self.changed = True

    def finish(self) -> tuple[Graph, bool]:
        """The edited graph, nodes left without readers dropped, and True; or the untouched input and False.

        Returning the input when no node changed also drops constants that a
        rewrite prepared before it found it could not apply.
        """
        if not self.changed:
            return self._source, False
        self._prune()
        return self.graph, True

    def _prune(self) -> None:
        needed = set(self.graph.outputs)
        kept = []
        for node in reversed(self.graph.nodes):
            if any(o in needed for o in node.outputs):
                kept.append(node)
                needed.update(i for i in node.inputs if i)
        self.graph.nodes = kept[::-1]
        self.graph.remove_unused_tensors()


def _same_constant(a: Tensor, b: Tensor) -> bool:
    return (a.dtype, a.shape, a.layout, a.quant) == (b.dtype, b.shape, b.layout, b.quant) and a.data.tobytes() == b.data.tobytes()
