"""Rewrite a float graph into int8 once every quantized tensor has its parameters.

Weighted ops get int8 weights and an int32 bias (a zero bias when the source
has none). Every grouped tensor becomes int8 under its name; where float
nodes of a QDQ source's islands use or produce it, a float twin `<name>_float`
is joined to it by an explicit `dequantize` or `quantize` node.
"""
from __future__ import annotations

import numpy as np

from kiln.errors import KilnError, node_context
from kiln.ir.graph import Graph, Node, QuantParams, Tensor, unique_name
from kiln.ir.uses import Uses
from kiln.quantize.groups import Plan
from kiln.quantize.scheme import WEIGHTED, bias_params, quantize_array, quantize_bias, quantize_weights, recover_integers


def rewrite(graph: Graph, plan: Plan, params: dict[str, QuantParams], per_channel: bool) -> None:
    """Edit `graph` (already a copy) into its int8 form."""
    edit = _Edit(graph)
    for index, node in enumerate(graph.nodes):
        if node.name not in plan.int8_nodes:
            continue
        if node.op in WEIGHTED:
            where = node_context(index, node.name, node.op, node.source, node.source_name)
            _quantize_weighted(edit, node, params[node.inputs[0]], per_channel, where)
    for name in sorted(plan.quantized):
        _retype(edit, plan, name, params[name])
    edit.place_new_nodes()


class _Edit:
    """The graph being rewritten with an index of its tensors' producers and readers, and the nodes to
    insert, placed once at the end: each edit costs time in what it touches, not in the graph's size."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.uses = Uses(graph.nodes)
        self.node_names = {n.name for n in graph.nodes}
        self.position = {id(n): i for i, n in enumerate(graph.nodes)}
        self.before: dict[int, list[Node]] = {}  # id of a graph node -> nodes to put before it, in order
        self.after: dict[int, list[Node]] = {}  # ... and after it

    def new_node(self, base: str, op: str, inputs: list[str], outputs: list[str], attrs: dict | None = None,
                 origin: Node | None = None) -> Node:
        """A node named after `base`; part of `origin`'s layer (its source text and name) when given."""
        name = unique_name(base, self.node_names)
        self.node_names.add(name)
        node = Node(name, op, inputs, outputs, attrs or {})
        if origin is not None:
            node.source, node.source_name = origin.source, origin.source_name
        self.uses.add(node)
        return node

    def change(self, node: Node, inputs: list[str] | None = None, outputs: list[str] | None = None) -> None:
        self.uses.drop(node)
        node.inputs = node.inputs if inputs is None else inputs
        node.outputs = node.outputs if outputs is None else outputs
        self.uses.add(node)

    def insert_after(self, node: Node, new: Node) -> None:
        self.after.setdefault(id(node), []).insert(0, new)  # each insertion goes right after the node

    def insert_before_first_use(self, name: str, new: Node) -> None:
        first = min(self.uses.readers(name), key=lambda n: self.position[id(n)])
        self.before.setdefault(id(first), []).append(new)

    def place_new_nodes(self) -> None:
        self.graph.nodes = [m for n in self.graph.nodes for m in (*self.before.get(id(n), ()), n, *self.after.get(id(n), ()))]


def _quantize_weighted(edit: _Edit, node: Node, in_params: QuantParams, per_channel: bool, where: str) -> None:
    graph = edit.graph
    w = graph.tensors[node.inputs[1]]
    if not w.is_constant:
        raise KilnError(f"{where}: weights {w.name!r} are not constant; int8 kernels need constant weights")
    axis = WEIGHTED[node.op]
    if w.quant is not None:
        q, w_params = _source_weights(w, axis, where), w.quant
    else:
        q, w_params = quantize_weights(w.data, axis if per_channel else None)
    _set_constant(edit, node, 1, w.copy(dtype="int8", quant=w_params, data=q))
    channels = w.shape[axis]
    bias = graph.tensors[node.inputs[2]] if len(node.inputs) > 2 and node.inputs[2] else None
    if bias is not None and not bias.is_constant:
        raise KilnError(f"{where}: bias {bias.name!r} is not constant")
    b_params = bias_params(in_params, w_params)
    data = bias.data if bias is not None else np.zeros(channels, np.float32)
    base = bias if bias is not None else Tensor(f"{node.name}_bias", (channels,), "float32")
    _set_constant(edit, node, 2, base.copy(dtype="int32", layout="", quant=b_params, data=quantize_bias(data, b_params)))


def _source_weights(w: Tensor, axis: int, where: str) -> np.ndarray:
    """The source's int8 weights, recovered exactly from their dequantized float values."""
    q = w.quant
    if any(z != 0 for z in q.zero_point):
        raise KilnError(f"{where}: weights {w.name!r} have zero point(s) {sorted(set(q.zero_point))}; int8 kernels need symmetric weights (zero point 0)")
    if q.axis is not None and q.axis != axis:
        raise KilnError(f"{where}: weights {w.name!r} are quantized along axis {q.axis}; the kernel needs the output-channel axis {axis}")
    ints = recover_integers(w.data, q)
    if ints is None:
        raise KilnError(f"{where}: weights {w.name!r} are not exactly scale × int8 values; their source quantization cannot be recovered")
    return ints


def _set_constant(edit: _Edit, node: Node, index: int, tensor: Tensor) -> None:
    """Make `tensor` input `index` of `node`: in place when only this node uses the old tensor, else as a new one."""
    graph = edit.graph
    old = node.inputs[index] if index < len(node.inputs) else ""
    if old and len(edit.uses.reads(old)) == 1 and old not in graph.outputs:
        graph.tensors[old] = tensor.copy(name=old)
        return
    name = graph.unique_tensor_name(tensor.name if not old else f"{old}_{node.name}")
    graph.add_tensor(tensor.copy(name=name))
    inputs = node.inputs + [""] * (index + 1 - len(node.inputs))
    inputs[index] = name
    edit.change(node, inputs=inputs)


def _retype(edit: _Edit, plan: Plan, name: str, params: QuantParams) -> None:
    """Make tensor `name` int8; float users (and a float producer) get a float twin joined by a (de)quantize node."""
    graph = edit.graph
    t = graph.tensors[name]
    producer = edit.uses.producers.get(name)
    float_users = [n for n in edit.uses.readers(name) if n.name not in plan.int8_nodes]
    int8_produced = producer is None or producer.name in plan.int8_nodes
    if not int8_produced:
        twin = _twin(graph, t)
        edit.change(producer, outputs=[twin if o == name else o for o in producer.outputs])
        _use(edit, float_users, name, twin)
        graph.tensors[name] = t.copy(dtype="int8", quant=params)
        edit.insert_after(producer, edit.new_node(f"{name}_quantize", "quantize", [twin], [name], {"to": "int8"}, producer))
        return
    data = None if t.data is None else quantize_array(t.data, params, what=f"constant {name!r}")
    graph.tensors[name] = t.copy(dtype="int8", quant=params, data=data)
    if float_users:
        twin = _twin(graph, t)
        _use(edit, float_users, name, twin)
        if t.is_constant:
            graph.tensors[twin] = graph.tensors[twin].copy(data=t.data)
            return
        node = edit.new_node(f"{name}_dequantize", "dequantize", [name], [twin], {}, producer)
        if producer is not None:
            edit.insert_after(producer, node)
        else:
            edit.insert_before_first_use(name, node)


def _use(edit: _Edit, nodes: list[Node], old: str, new: str) -> None:
    """Point these nodes' inputs at `new` instead of `old` (graph outputs keep naming the int8 tensor)."""
    for n in nodes:
        edit.change(n, inputs=[new if i == old else i for i in n.inputs])


def _twin(graph: Graph, t: Tensor) -> str:
    """A new float tensor `<name>_float` shaped like `t` (no data, no parameters)."""
    return graph.add_tensor(Tensor(graph.unique_tensor_name(f"{t.name}_float"), t.shape, "float32", t.layout)).name
