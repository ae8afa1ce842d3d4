"""Rewrite a float graph into int8 once every quantized tensor has its parameters.

Weighted ops get int8 weights and an int32 bias (a zero bias when the source
has none). Every grouped tensor becomes int8 under its name; where float
nodes of a QDQ source's islands use or produce it, a float twin `<name>_float`
is joined to it by an explicit `dequantize` or `quantize` node.
"""
from __future__ import annotations

import numpy as np

from kiln.errors import KilnError, node_context
from kiln.ir.graph import Graph, Node, QuantParams, Tensor
from kiln.quantize.groups import Plan
from kiln.quantize.scheme import WEIGHTED, bias_params, quantize_array, quantize_bias, quantize_weights, recover_integers


def rewrite(graph: Graph, plan: Plan, params: dict[str, QuantParams], per_channel: bool) -> None:
    """Edit `graph` (already a copy) into its int8 form."""
    for index, node in enumerate(list(graph.nodes)):
        if node.name not in plan.int8_nodes:
            continue
        if node.op in WEIGHTED:
            where = node_context(index, node.name, node.op, node.source)
            _quantize_weighted(graph, node, params[node.inputs[0]], per_channel, where)
    for name in sorted(plan.quantized):
        _retype(graph, plan, name, params[name])


def _quantize_weighted(graph: Graph, node: Node, in_params: QuantParams, per_channel: bool, where: str) -> None:
    w = graph.tensors[node.inputs[1]]
    if not w.is_constant:
        raise KilnError(f"{where}: weights {w.name!r} are not constant; int8 kernels need constant weights")
    axis = WEIGHTED[node.op]
    if w.quant is not None:
        q, w_params = _source_weights(w, axis, where), w.quant
    else:
        q, w_params = quantize_weights(w.data, axis if per_channel else None)
    _set_constant(graph, node, 1, w.copy(dtype="int8", quant=w_params, data=q))
    channels = w.shape[axis]
    bias = graph.tensors[node.inputs[2]] if len(node.inputs) > 2 and node.inputs[2] else None
    if bias is not None and not bias.is_constant:
        raise KilnError(f"{where}: bias {bias.name!r} is not constant")
    b_params = bias_params(in_params, w_params)
    data = bias.data if bias is not None else np.zeros(channels, np.float32)
    base = bias if bias is not None else Tensor(f"{node.name}_bias", (channels,), "float32")
    _set_constant(graph, node, 2, base.copy(dtype="int32", layout="", quant=b_params, data=quantize_bias(data, b_params)))


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


def _set_constant(graph: Graph, node: Node, index: int, tensor: Tensor) -> None:
    """Make `tensor` input `index` of `node`: in place when only this node uses the old tensor, else as a new one."""
    old = node.inputs[index] if index < len(node.inputs) else ""
    users = [n for n in graph.nodes for i in n.inputs if old and i == old]
    if old and len(users) == 1 and old not in graph.outputs:
        graph.tensors[old] = tensor.copy(name=old)
        return
    name = graph.unique_tensor_name(tensor.name if not old else f"{old}_{node.name}")
    graph.add_tensor(tensor.copy(name=name))
    node.inputs.extend([""] * (index + 1 - len(node.inputs)))
    node.inputs[index] = name


def _retype(graph: Graph, plan: Plan, name: str, params: QuantParams) -> None:
    """Make tensor `name` int8; float users (and a float producer) get a float twin joined by a (de)quantize node."""
    t = graph.tensors[name]
    producer = next((n for n in graph.nodes if name in n.outputs), None)
    float_users = [n for n in graph.nodes if name in n.inputs and n.name not in plan.int8_nodes]
    int8_produced = producer is None or producer.name in plan.int8_nodes
    if not int8_produced:
        twin = _twin(graph, t)
        producer.outputs = [twin if o == name else o for o in producer.outputs]
        _use(float_users, name, twin)
        graph.tensors[name] = t.copy(dtype="int8", quant=params)
        _insert_after(graph, producer, Node(graph.unique_node_name(f"{name}_quantize"), "quantize", [twin], [name], {"to": "int8"}))
        return
    data = None if t.data is None else quantize_array(t.data, params, what=f"constant {name!r}")
    graph.tensors[name] = t.copy(dtype="int8", quant=params, data=data)
    if float_users:
        twin = _twin(graph, t)
        _use(float_users, name, twin)
        if t.is_constant:
            graph.tensors[twin] = graph.tensors[twin].copy(data=t.data)
            return
        node = Node(graph.unique_node_name(f"{name}_dequantize"), "dequantize", [name], [twin])
        if producer is not None:
            _insert_after(graph, producer, node)
        else:
            graph.nodes.insert(_first_use(graph, name), node)


def _use(nodes: list[Node], old: str, new: str) -> None:
    """Point these nodes' inputs at `new` instead of `old` (graph outputs keep naming the int8 tensor)."""
    for n in nodes:
        n.inputs = [new if i == old else i for i in n.inputs]


def _twin(graph: Graph, t: Tensor) -> str:
    """A new float tensor `<name>_float` shaped like `t` (no data, no parameters)."""
    return graph.add_tensor(Tensor(graph.unique_tensor_name(f"{t.name}_float"), t.shape, "float32", t.layout)).name


def _insert_after(graph: Graph, producer: Node, node: Node) -> None:
    graph.nodes.insert(graph.nodes.index(producer) + 1, node)


def _first_use(graph: Graph, name: str) -> int:
    return next(i for i, n in enumerate(graph.nodes) if name in n.inputs)
