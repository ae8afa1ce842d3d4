"""The conversion passes: a static check of every node, then node-by-node conversion.

Both passes collect problems instead of stopping, so one import reports every
unsupported node. A node that fails (or reads a failed node's output) marks
its outputs as failed, and the nodes behind it are only statically checked.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator

from kiln.frontends.onnx.context import Converter, OnnxNode, Unsupported
from kiln.frontends.onnx.handlers import HANDLERS, STATIC_CHECKS
from kiln.ir.ops import OpError

# Ops that are never evaluated at import: random ones, and ones whose body is a subgraph.
NEVER_FOLD = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial", "If", "Loop", "Scan"})
Problem = tuple[int, str]


def decode_attrs(node: onnx.NodeProto) -> dict[str, Any]:
    attrs = {}
    for a in node.attribute:
        value = onnx.helper.get_attribute_value(a)
        if isinstance(value, bytes):
            value = value.decode("utf-8")
        elif isinstance(value, list) and value and isinstance(value[0], bytes):
            value = [v.decode("utf-8") for v in value]
        attrs[a.name] = value
    return attrs


def named_nodes(graph: onnx.GraphProto) -> list[OnnxNode]:
    """The nodes with unique, stable names: the ONNX name, else `<OpType>_<index>`, made unique by a suffix."""
    taken = {n.name for n in graph.node if n.name}
    seen: set[str] = set()
    nodes = []
    for index, proto in enumerate(graph.node):
        base = proto.name or f"{proto.op_type}_{index}"
        name, i = base, 1
        while name in seen or (name != proto.name and name in taken):
            name, i = f"{base}_{i}", i + 1
        seen.add(name)
        nodes.append(OnnxNode(index, name, proto, decode_attrs(proto)))
    return nodes


def static_problems(nodes: list[OnnxNode], constants: set[str], opset: int) -> list[Problem]:
    """Problems visible from each node alone: unknown domain or op type, unsupported attributes.

    An op Kiln does not implement is fine when all its inputs are constant
    (it is evaluated at import), so constness is tracked along the way.
    """
    const = set(constants)
    problems = []
    for n in nodes:
        all_const = all(not i or i in const for i in n.inputs)
        reason = None
        if n.proto.domain not in ("", "ai.onnx"):
            reason = f"operator domain {n.proto.domain!r} is not supported"
        elif n.op_type in HANDLERS:
            reason = STATIC_CHECKS.get(n.op_type, lambda *_: None)(n, opset)
        elif not all_const or not foldable(n):
            reason = "operator not supported by Kiln"
        if reason:
            problems.append((n.index, f"{n.where}: {reason}"))
        elif all_const and foldable(n) or n.op_type in ("Shape", "Size", "Constant"):
            const.update(n.outputs)
    return problems


def foldable(n: OnnxNode) -> bool:
    """Whether evaluating the node at import is sound: deterministic and without a subgraph body."""
    return n.op_type not in NEVER_FOLD and not any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in n.proto.attribute)


def convert_nodes(cx: Converter, nodes: list[OnnxNode], skip: set[int], onnx_shapes: dict[str, tuple[int, ...]]) -> list[Problem]:
    failed: set[str] = set()
    problems = []
    for n in nodes:
        if n.index in skip or any(i in failed for i in n.inputs):
            failed.update(n.outputs)
            continue
        cx.layer = n.name
        try:
            if n.op_type in HANDLERS:
                HANDLERS[n.op_type](cx, n)
            else:
                _fold_with_onnx(cx, n)
            _cross_check(cx, n, onnx_shapes)
        except (Unsupported, OpError) as exc:
            problems.append((n.index, f"{n.where}: {exc}"))
            failed.update(n.outputs)
    return problems


def _fold_with_onnx(cx: Converter, n: OnnxNode) -> None:
    """An op outside Kiln's set with constant inputs (shape arithmetic): evaluate it with ONNX's reference."""
    if not all(cx.is_const(i) for i in n.inputs):
        raise Unsupported("operator not supported by Kiln")
    try:
        outs = ReferenceEvaluator(n.proto, opsets={"": cx.opset}).run(None, {i: cx.value(i) for i in n.inputs if i})
    except Exception as exc:  # the ONNX reference raises whatever its op implementation raises
        raise Unsupported(f"evaluating the constant operator failed ({exc})") from None
    for name, arr in zip(n.proto.output, outs):
        if name:
            cx.values[name] = np.asarray(arr)


def _cross_check(cx: Converter, n: OnnxNode, onnx_shapes: dict[str, tuple[int, ...]]) -> None:
    """Kiln's inferred shapes must equal ONNX's wherever ONNX knows them statically."""
    for out in n.outputs:
        if cx.resolve(out) != out or out in cx.pending or out not in onnx_shapes:
            continue
        t = cx.graph.tensors.get(out)
        shape = t.shape if t is not None else cx.values[out].shape
        if tuple(shape) != onnx_shapes[out]:
            raise Unsupported(f"output {out!r}: Kiln infers shape {list(shape)}, ONNX shape inference {list(onnx_shapes[out])}")
