"""What every pass shares: a copy-on-write graph editor and quantization bookkeeping.

A pass builds a `Rewriter` over its input graph, walks the nodes in order and
splices replacements in place, so the node order stays topological and nodes
created while walking are seen by later matches. A pass that matches nothing
costs one walk and the lookups it makes: the graph is not copied. Generated
names derive from the name of the node being rewritten, so they depend only
on the graph, never on the order in which the pass happened to visit things.
"""
from __future__ import annotations

import math
from typing import Any, Iterator

import numpy as np

from kiln.ir.graph import DTYPES, Graph, Node, QuantParams, Tensor, dtype_name, unique_name
from kiln.ir.uses import Uses

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
    """Edits a graph copy-on-write: the graph it was built from is never touched, and nothing is copied
    until something changes.

    Lookups are indexed, so a query or an edit costs time in what it touches, not in the size of the
    graph: producers and readers of every tensor are kept up to date as nodes are replaced (built on first
    use), and every live node knows its place in the node order. Nodes are never changed in place: `edit`
    puts a changed copy in the node's place, and a walk that reaches the node yields the copy.
    """

    def __init__(self, graph: Graph) -> None:
        self._source = graph
        self.outputs = list(graph.outputs)
        self.changed = False
        self._tensors = graph.tensors  # shared until the first tensor edit
        self._own_tensors = False
        self._order: list[list[Node]] | None = None  # one slot per source node, built on the first node edit
        self._slot: dict[int, int] = {}  # id of a live node -> its slot
        self._forward: dict[int, tuple[Node, Node]] = {}  # id of an edited node -> (it, its copy)
        self._uses: Uses | None = None  # built on the first lookup
        self._node_names: set[str] | None = None

    # -- queries -----------------------------------------------------------
    def walk(self) -> Iterator[Node]:
        """The nodes as of now, in order, skipping those removed or replaced meanwhile (edited ones as edited)."""
        for node in self._nodes():
            node = self._current(node)
            if self._order is None or id(node) in self._slot:
                yield node

    def producer(self, name: str) -> Node | None:
        return self._index().producers.get(name)

    def consumers(self, name: str) -> list[Node]:
        """The nodes reading tensor `name`, one entry per input that reads it."""
        return self._index().reads(name)

    def only_user(self, name: str, node: Node) -> bool:
        """Whether `node` is the one reader of tensor `name` (and it is no graph output)."""
        return name not in self.outputs and self._index().only_reader(name, self._current(node))

    def tensor(self, name: str) -> Tensor:
        return self._tensors[name]

    def const(self, name: str) -> np.ndarray | None:
        t = self._tensors.get(name) if name else None
        return None if t is None else t.data

    # -- edits -------------------------------------------------------------
    def replace(self, old: Node, new: list[Node]) -> None:
        """Put `new` (in order) where `old` was."""
        old = self._current(old)
        if self._order is None:
            self._order = [[n] for n in self._source.nodes]
            self._slot = {id(n): i for i, n in enumerate(self._source.nodes)}
        slot = self._slot.pop(id(old))
        nodes = self._order[slot]
        at = next(i for i, n in enumerate(nodes) if n is old)
        nodes[at : at + 1] = new
        if self._uses is not None:
            self._uses.drop(old)
        for n in new:
            self._slot[id(n)] = slot
            if self._uses is not None:
                self._uses.add(n)
        self.changed = True

    def remove(self, node: Node) -> None:
        self.replace(node, [])

    def edit(self, node: Node, **changes: Any) -> Node:
        """A copy of `node` with `changes` takes its place; references to `node` now mean the copy."""
        node = self._current(node)
        new = node.copy(**changes)
        self.replace(node, [new])
        self._forward[id(node)] = (node, new)
        return new

    def replace_uses(self, old: str, new: str) -> None:
        """Point every use of tensor `old` (node inputs and graph outputs) at `new`."""
        for node in self._index().readers(old):
            self.edit(node, inputs=[new if i == old else i for i in node.inputs])
        if old in self.outputs:
            self.outputs = [new if o == old else o for o in self.outputs]
            self.changed = True

    def node(self, base: str, op: str, inputs: list[str], outputs: list[str], attrs: dict[str, Any], origin: Node) -> Node:
        """A new node named after `base` (unique in the graph), part of `origin`'s layer: it keeps `origin`'s source
        text and source name. The caller splices it in."""
        if self._node_names is None:
            self._node_names = {n.name for n in self._source.nodes}
        name = unique_name(base, self._node_names)
        self._node_names.add(name)
        return Node(name, op, inputs, outputs, attrs, origin.source, origin.source_name)

    def tensor_like(self, base: str, shape: tuple[int, ...], dtype: str, quant: QuantParams | None = None, layout: str = "") -> str:
        return self._add(Tensor(unique_name(base, self._tensors), shape, dtype, layout, quant))

    def constant(self, base: str, data: np.ndarray, dtype: str | None = None, quant: QuantParams | None = None, layout: str = "") -> str:
        """A constant named after `base`; an existing `base` with the same content is shared, not duplicated."""
        arr = np.asarray(data)
        dtype = dtype or dtype_name(arr.dtype)
        tensor = Tensor(base, arr.shape, dtype, layout, quant, arr.astype(DTYPES[dtype], copy=False))
        old = self._tensors.get(base)
        if old is not None and old.data is not None and _same_constant(old, tensor):
            return base
        tensor.name = unique_name(base, self._tensors)
        return self._add(tensor)

    def set_tensor(self, name: str, **changes: Any) -> None:
        self._own()[name] = self._tensors[name].copy(**changes)
        self.changed = True

    def finish(self) -> tuple[Graph, bool]:
        """The edited graph, nodes left without readers dropped, and True; or the untouched input and False.

        Returning the input when no node changed also drops constants that a
        rewrite prepared before it found it could not apply.
        """
        if not self.changed:
            return self._source, False
        needed = set(self.outputs)
        kept = []
        for node in reversed(self._nodes()):
            if any(o in needed for o in node.outputs):
                kept.append(node)
                needed.update(i for i in node.inputs if i)
        src = self._source
        meta = {k: list(v) if isinstance(v, list) else v for k, v in src.meta.items()}
        graph = Graph(src.name, dict(self._tensors), kept[::-1], list(src.inputs), list(self.outputs), meta)
        graph.remove_unused_tensors()
        return graph, True

    # -- the indexes ---------------------------------------------------------
    def _nodes(self) -> list[Node]:
        return list(self._source.nodes) if self._order is None else [n for nodes in self._order for n in nodes]

    def _current(self, node: Node) -> Node:
        while (step := self._forward.get(id(node))) is not None and step[0] is node:
            node = step[1]
        return node

    def _index(self) -> Uses:
        if self._uses is None:
            self._uses = Uses(self._nodes())
        return self._uses

    def _own(self) -> dict[str, Tensor]:
        if not self._own_tensors:
            self._tensors, self._own_tensors = dict(self._tensors), True
        return self._tensors

    def _add(self, tensor: Tensor) -> str:
        self._own()[tensor.name] = tensor
        return tensor.name


def _same_constant(a: Tensor, b: Tensor) -> bool:
    return (a.dtype, a.shape, a.layout, a.quant) == (b.dtype, b.shape, b.layout, b.quant) and a.data.tobytes() == b.data.tobytes()
