"""Which nodes run in int8, and which tensors must share quantization parameters.

A float source runs every node in int8. A QDQ source runs a node in int8 when
the source quantized its outputs (or, for ops that only move data, its
inputs); the other nodes form float islands.

Tensors that must share parameters (data movement, average pooling, concat)
form groups. A group is pinned when a member's parameters are fixed (by the
source's QDQ parameters or by the op, e.g. softmax's 1/256); two differently
pinned groups are never merged: a requantizing `clamp` (bounds ±inf) is
inserted on the edge instead (for a concat whose output is free, on every
pinned input, so the concat is calibrated over all of them). Unpinned groups
get their parameters from the union of their members' calibrated ranges.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from toolchain.errors import KilnError, node_context
from toolchain.ir.graph import Graph, Node, QuantParams, Tensor
from toolchain.quantize.scheme import DATA_MOVEMENT, FIXED_OUTPUT, FLOAT_ONLY, SHARES_INPUT, UNIFIED, WEIGHTED, choose_qparams


def activation_inputs(node: Node) -> list[str]:
    """The inputs that carry activation-like values (weights and biases of weighted ops excluded)."""
    names = node.inputs[:1] if node.op in WEIGHTED else node.inputs
    return [i for i in names if i]


@dataclass
class Plan:
    """int8 nodes, and every float tensor that gets int8 parameters (its own or its int8 twin's)."""

    int8_nodes: set[str] = field(default_factory=set)
    quantized: set[str] = field(default_factory=set)


def plan_int8(graph: Graph) -> Plan:
    """Decide the int8 nodes in graph order (a data-movement node follows its inputs) and the tensors to quantize."""
    qdq = graph.meta.get("quantized_source") == "qdq"
    plan = Plan()
    int8_values = set(graph.inputs)
    for index, node in enumerate(graph.nodes):
        if _runs_int8(graph, node, int8_values, qdq, index):
            plan.int8_nodes.add(node.name)
            int8_values.update(node.outputs)
            plan.quantized.update(t for t in activation_inputs(node) + node.outputs if _is_float(graph.tensors[t]))
    plan.quantized.update(t for t in graph.inputs + graph.outputs if _is_float(graph.tensors[t]))
    return plan


def _is_float(t: Tensor) -> bool:
    return t.dtype == "float32"


def _runs_int8(graph: Graph, node: Node, int8_values: set[str], qdq: bool, index: int) -> bool:
    if not qdq:
        if node.op in FLOAT_ONLY:
            raise KilnError(f"{node_context(index, node.name, node.op, node.source)}: no int8 kernel; keep it in a float "
                            "island of a QDQ model, or build the model in float (quant.mode = \"none\")")
        return True
    if node.op in FLOAT_ONLY:
        return False
    outs = [graph.tensors[o] for o in node.outputs]
    if outs and all(t.quant is not None for t in outs):
        return True
    ins = [i for i in activation_inputs(node) if not graph.tensors[i].is_constant]
    return node.op in DATA_MOVEMENT and bool(ins) and all(i in int8_values or graph.tensors[i].quant is not None for i in ins)


class Groups:
    """Union-find over tensor names; a root may carry pinned parameters."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}
        self.pin: dict[str, QuantParams] = {}

    def find(self, name: str) -> str:
        self.parent.setdefault(name, name)
        while self.parent[name] != name:
            self.parent[name] = self.parent[self.parent[name]]
            name = self.parent[name]
        return name

    def union(self, a: str, b: str) -> bool:
        """Merge a's and b's groups; False (no merge) when both are pinned to different parameters."""
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return True
        pa, pb = self.pin.get(ra), self.pin.get(rb)
        if pa is not None and pb is not None and pa != pb:
            return False
        self.parent[rb] = ra
        if pa is None and pb is not None:
            self.pin[ra] = self.pin.pop(rb)
        return True

    def members(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for name in sorted(self.parent):
            out.setdefault(self.find(name), []).append(name)
        return out


def build_groups(graph: Graph, plan: Plan) -> Groups:
    """Group `plan.quantized` tensors by the sharing rules; edits `graph` (and `plan`) to insert requantizations."""
    groups = Groups()
    for name in sorted(plan.quantized):
        groups.find(name)
        given = _given_params(graph.tensors[name])
        if given is not None:
            groups.pin[name] = given
    for node in list(graph.nodes):
        if node.name in plan.int8_nodes and node.op in FIXED_OUTPUT:
            _pin_fixed_output(graph, plan, groups, node)
    for node in list(graph.nodes):
        if node.name not in plan.int8_nodes:
            continue
        if node.op in SHARES_INPUT:
            for out in node.outputs:
                _join(graph, plan, groups, node, 0, out)
        elif node.op in UNIFIED:
            _unify(graph, plan, groups, node)
    return groups


def _join(graph: Graph, plan: Plan, groups: Groups, node: Node, index: int, out: str) -> None:
    """Put input `index` in `out`'s group, through a requantization when their pins differ."""
    if not groups.union(node.inputs[index], out):
        _requantize_input(graph, plan, groups, node, index, out)


def _requantize_input(graph: Graph, plan: Plan, groups: Groups, node: Node, index: int, out: str) -> None:
    """Feed input `index` through a requantizing clamp whose output joins `out`'s group."""
    requantized = insert_requantize_before(graph, node, index)
    plan.int8_nodes.add(graph.producers()[requantized].name)
    plan.quantized.add(requantized)
    groups.union(out, requantized)


def _unify(graph: Graph, plan: Plan, groups: Groups, node: Node) -> None:
    """One group for a concat's inputs and output. When unpinned output meets inputs pinned to different
    parameters, every pinned input is requantized, so the group is calibrated over all of them."""
    out = node.outputs[0]
    indices = [i for i, name in enumerate(node.inputs) if name]
    pins = {groups.pin.get(groups.find(node.inputs[i])) for i in indices} - {None}
    requantize_pinned = groups.find(out) not in groups.pin and len(pins) > 1
    for i in indices:
        if requantize_pinned and groups.find(node.inputs[i]) in groups.pin:
            _requantize_input(graph, plan, groups, node, i, out)
        else:
            _join(graph, plan, groups, node, i, out)


def _given_params(t: Tensor) -> QuantParams | None:
    """The source's parameters of an activation tensor, checked against what int8 activations allow."""
    q = t.quant
    if q is None:
        return None
    if q.axis is not None and len(q.scale) > 1:
        raise KilnError(f"tensor {t.name!r}: per-channel quantization of an activation is not supported by int8 kernels")
    if not -128 <= q.zero_point[0] <= 127:
        raise KilnError(f"tensor {t.name!r}: zero point {q.zero_point[0]} is outside int8 [-128, 127]")
    return QuantParams(q.scale[:1], q.zero_point[:1])


def _pin_fixed_output(graph: Graph, plan: Plan, groups: Groups, node: Node) -> None:
    """Pin the op's fixed output parameters; a source that chose others gets a requantization after the op."""
    out = node.outputs[0]
    fixed = FIXED_OUTPUT[node.op]
    root = groups.find(out)
    given = groups.pin.get(root)
    if given is not None and given != fixed:
        moved = insert_requantize_after(graph, node, out)
        plan.int8_nodes.add(graph.producers()[moved].name)
        plan.quantized.add(moved)
        groups.pin[groups.find(moved)] = groups.pin.pop(root)
    groups.pin[groups.find(out)] = fixed


def _clamp_node(graph: Graph, base: str, src: str, dst: str) -> Node:
    name = graph.unique_node_name(f"{base}_requantize")
    return Node(name, "clamp", [src], [dst], {"act_min": -math.inf, "act_max": math.inf})


def insert_requantize_before(graph: Graph, node: Node, index: int) -> str:
    """Feed `node` input `index` through a requantizing clamp; returns the clamp's output name."""
    src = node.inputs[index]
    dst = graph.add_tensor(graph.tensors[src].copy(name=graph.unique_tensor_name(f"{src}_requantized"), quant=None, data=None)).name
    graph.nodes.insert(graph.nodes.index(node), _clamp_node(graph, node.name, src, dst))
    node.inputs[index] = dst
    return dst


def insert_requantize_after(graph: Graph, node: Node, out: str) -> str:
    """Route every use of `node`'s output `out` through a requantizing clamp; the clamp's output takes over
    `out`'s source parameters. Returns the clamp's output name."""
    t = graph.tensors[out]
    dst = graph.add_tensor(t.copy(name=graph.unique_tensor_name(f"{out}_requantized"))).name
    graph.tensors[out] = t.copy(quant=None)
    users = [n for n in graph.nodes if out in n.inputs]
    graph.replace_uses(out, dst, users)
    graph.nodes.insert(graph.nodes.index(node) + 1, _clamp_node(graph, node.name, out, dst))
    return dst


def group_params(graph: Graph, groups: Groups, ranges: dict[str, tuple[float, float]]) -> dict[str, QuantParams]:
    """Parameters of every grouped tensor: the pin, or the union of the members' ranges."""
    params: dict[str, QuantParams] = {}
    for root, names in groups.members().items():
        p = groups.pin.get(root)
        if p is None:
            spans = [_range(graph.tensors[n], ranges) for n in names]
            spans = [s for s in spans if s is not None]
            p = choose_qparams(min(s[0] for s in spans), max(s[1] for s in spans))
        params.update((n, p) for n in names)
    return params


def _range(t: Tensor, ranges: dict[str, tuple[float, float]]) -> tuple[float, float] | None:
    if t.is_constant:
        return (float(np.min(t.data, initial=0.0)), float(np.max(t.data, initial=0.0)))
    return ranges.get(t.name)


def unfixed(graph: Graph, groups: Groups) -> list[str]:
    """Tensors whose parameters must come from calibration: the non-constant members of unpinned groups."""
    return [n for root, names in groups.members().items() if root not in groups.pin
            for n in names if not graph.tensors[n].is_constant]
