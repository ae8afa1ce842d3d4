"""Which nodes run in int8, and which tensors must share quantization parameters.

A float source runs every node in int8. A QDQ source runs a node in int8 when
the source quantized its outputs (or, for ops that only move data, its
inputs); the other nodes form float islands.

Tensors that must share parameters (data movement, average pooling, concat)
form groups. A group is pinned when a member's parameters are given (by the
source's QDQ parameters) or fixed by its op (softmax's 1/256). The rule:
every tensor's int8 range covers its calibrated float range. So two groups
merge only when their constraints agree: two pins must be equal, and a fixed
pin must cover the calibrated range of the group it would absorb (to within
one step: a softmax reaches 1.0, its grid 255/256).
Where they disagree, a requantizing `clamp` (bounds ±inf) is inserted on the
edge: before a data-movement op's input, or on a concat input, so the concat
is calibrated over all its inputs (TFLite requantizes such concat inputs
too). An unpinned group gets its parameters from the union of its members'
calibrated ranges. A source's given parameters are taken as they are: what
the source chose to clip stays clipped.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from kiln.errors import KilnError, node_context
from kiln.ir.graph import Graph, Node, QuantParams, Tensor
from kiln.quantize.scheme import (DATA_MOVEMENT, FIXED_OUTPUT, FLOAT_ONLY, PARAMETERS, SHARES_INPUT, UNIFIED, WEIGHTED,
                                      choose_qparams)


def activation_inputs(node: Node) -> list[str]:
    """The inputs that carry activation-like values (weights and biases of weighted ops excluded)."""
    names = node.inputs[:1] if node.op in WEIGHTED or node.op in PARAMETERS else node.inputs
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
            raise KilnError(f"{node_context(index, node.name, node.op, node.source, node.source_name)}: no int8 kernel; keep it in a float "
                            "island of a QDQ model, or build the model in float (quant.mode = \"none\")")
        return True
    if node.op in FLOAT_ONLY:
        return False
    outs = [graph.tensors[o] for o in node.outputs]
    if outs and all(t.quant is not None for t in outs):
        return True
    ins = [i for i in activation_inputs(node) if not graph.tensors[i].is_constant]
    return node.op in DATA_MOVEMENT and bool(ins) and all(i in int8_values or graph.tensors[i].quant is not None for i in ins)


Span = tuple[float, float]


class Groups:
    """Union-find over tensor names. A root may carry pinned parameters (`fixed`: pinned by its op, so
    coverage-checked) and the union of its members' calibrated ranges (`span`, when calibration ran)."""

    def __init__(self, ranges: dict[str, Span]) -> None:
        self.parent: dict[str, str] = {}
        self.pin: dict[str, QuantParams] = {}
        self.fixed: set[str] = set()
        self.span: dict[str, Span] = {}
        self.ranges = ranges

    def find(self, name: str) -> str:
        if name not in self.parent:
            self.parent[name] = name
            if name in self.ranges:
                self.span[name] = self.ranges[name]
        while self.parent[name] != name:
            self.parent[name] = self.parent[self.parent[name]]
            name = self.parent[name]
        return name

    def union(self, a: str, b: str) -> bool:
        """Merge a's and b's groups; False (no merge) when their pins differ or a fixed pin misses the other's span."""
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return True
        pa, pb = self.pin.get(ra), self.pin.get(rb)
        if pa is not None and pb is not None and pa != pb:
            return False
        if (ra in self.fixed and not covers(pa, self.span.get(rb))) or (rb in self.fixed and not covers(pb, self.span.get(ra))):
            return False
        self.parent[rb] = ra
        if pa is None and pb is not None:
            self.pin[ra] = self.pin.pop(rb)
        if rb in self.fixed:
            self.fixed.discard(rb)
            self.fixed.add(ra)
        spans = [s for s in (self.span.get(ra), self.span.pop(rb, None)) if s is not None]
        if spans:
            self.span[ra] = (min(s[0] for s in spans), max(s[1] for s in spans))
        return True

    def members(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for name in sorted(self.parent):
            out.setdefault(self.find(name), []).append(name)
        return out


def covers(params: QuantParams, span: Span | None) -> bool:
    """Whether `params` represent the float range `span` to within one step (unknown spans are covered)."""
    if span is None:
        return True
    scale, zp = float(params.scale[0]), int(params.zero_point[0])
    return scale * (-129 - zp) <= span[0] and span[1] <= scale * (128 - zp)


def build_groups(graph: Graph, plan: Plan, ranges: dict[str, Span]) -> Groups:
    """Group `plan.quantized` tensors by the sharing rules; edits `graph` (and `plan`, `ranges`) to insert requantizations.

    `ranges` holds the calibrated range of every non-constant quantized tensor, or nothing (a QDQ source
    without calibration data, whose groups then merge on equal pins alone).
    """
    groups = Groups(ranges)
    for name in sorted(plan.quantized):
        t = graph.tensors[name]
        if t.is_constant:
            ranges.setdefault(name, (float(np.min(t.data, initial=0.0)), float(np.max(t.data, initial=0.0))))
        groups.find(name)
        given = _given_params(t)
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
    """Put input `index` in `out`'s group, through a requantization when their constraints disagree."""
    if not groups.union(node.inputs[index], out):
        _requantize_input(graph, plan, groups, node, index, out)


def _requantize_input(graph: Graph, plan: Plan, groups: Groups, node: Node, index: int, out: str) -> None:
    """Feed input `index` through a requantizing clamp whose output joins `out`'s group."""
    src = node.inputs[index]
    requantized = insert_requantize_before(graph, node, index)
    plan.int8_nodes.add(graph.producers()[requantized].name)
    plan.quantized.add(requantized)
    if src in groups.ranges:
        groups.ranges[requantized] = groups.ranges[src]
    if not groups.union(out, requantized):
        raise AssertionError(f"requantized {src!r} cannot join {out!r}")


def _unify(graph: Graph, plan: Plan, groups: Groups, node: Node) -> None:
    """One group for a concat's inputs and output: the unpinned inputs join first, so the group's span is
    whole when a pinned input is considered; a pinned input that disagrees with it is requantized."""
    out = node.outputs[0]
    indices = [i for i, name in enumerate(node.inputs) if name]
    pinned = [i for i in indices if groups.find(node.inputs[i]) in groups.pin]
    for i in [i for i in indices if i not in pinned] + pinned:
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
        if out in groups.ranges:
            groups.ranges[moved] = groups.ranges[out]
        groups.pin[groups.find(moved)] = groups.pin.pop(root)
    root = groups.find(out)
    groups.pin[root] = fixed
    groups.fixed.add(root)


def _clamp_node(graph: Graph, node: Node, src: str, dst: str) -> Node:
    """A requantizing clamp on an edge of `node`: part of `node`'s layer."""
    name = graph.unique_node_name(f"{node.name}_requantize")
    return Node(name, "clamp", [src], [dst], {"act_min": -math.inf, "act_max": math.inf}, node.source, node.source_name)


def insert_requantize_before(graph: Graph, node: Node, index: int) -> str:
    """Feed `node` input `index` through a requantizing clamp; returns the clamp's output name."""
    src = node.inputs[index]
    dst = graph.add_tensor(graph.tensors[src].copy(name=graph.unique_tensor_name(f"{src}_requantized"), quant=None, data=None)).name
    graph.nodes.insert(graph.nodes.index(node), _clamp_node(graph, node, src, dst))
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
    graph.nodes.insert(graph.nodes.index(node) + 1, _clamp_node(graph, node, out, dst))
    return dst


def group_params(groups: Groups) -> dict[str, QuantParams]:
    """Parameters of every grouped tensor: the pin, or those of the union of the members' ranges."""
    params: dict[str, QuantParams] = {}
    for root, names in groups.members().items():
        p = groups.pin.get(root) or choose_qparams(*groups.span[root])
        params.update((n, p) for n in names)
    return params


def unfixed(graph: Graph, groups: Groups) -> list[str]:
    """Tensors whose parameters must come from calibration: the non-constant members of unpinned groups."""
    return [n for root, names in groups.members().items() if root not in groups.pin
            for n in names if not graph.tensors[n].is_constant]
