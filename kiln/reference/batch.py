"""Run a graph on many samples at once: calibration and reports over thousands of samples.

A graph's shapes are those of one sample (batch dimension usually 1). Here
every non-constant value carries a leading sample axis: (S, *shape). A node
whose values all have batch dimension 1, and whose op treats axis 0 as the
batch (samplewise ops, and data movement that leaves axis 0 alone), runs once
on the S samples folded into axis 0; any other node runs sample by sample.
Each sample's values are those `executor.run` computes for it alone: the
folded ops compute every sample independently, in float64 (float) or exact
integers (int8).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from kiln.errors import KilnError, node_context
from kiln.ir.graph import DTYPES, Graph, Node, Tensor
from kiln.ir.ops import norm_axis
from kiln.reference import float_ops, source_ops  # noqa: F401  (register implementations)
from kiln.reference.impls import FLOAT_IMPLS, Impl

# Ops that compute each index of axis 0 from the same index of their inputs, whatever their attributes.
SAMPLEWISE = frozenset({
    "conv2d", "depthwise_conv2d", "fully_connected", "add", "sub", "mul", "div", "max_pool2d", "avg_pool2d",
    "global_avg_pool", "resize_nearest", "clamp", "leaky_relu", "sigmoid", "tanh", "hardsigmoid", "hardswish",
    "silu", "gelu", "quantize", "dequantize", "batch_matmul"})

BROADCASTING = frozenset({"add", "sub", "mul", "div"})

Visit = Callable[[str, np.ndarray], None]


def _folded(node: Node, rank: int, samples: int) -> Node | None:
    """`node` rewritten for `samples` samples folded into axis 0, or None when its op mixes axis 0."""
    a = node.attrs
    if node.op in SAMPLEWISE or (node.op in ("softmax", "layer_norm") and rank > 1):
        return node
    if node.op in ("concat", "split"):
        return node if norm_axis(a["axis"], rank) != 0 else None
    if node.op == "transpose":
        return node if a["perm"][0] == 0 else None
    if node.op == "pad":
        return node if a["pads"][0] == 0 and a["pads"][rank] == 0 else None
    if node.op == "slice":
        if (a["starts"][0], a["ends"][0], a["steps"][0]) != (0, 1, 1):
            return None
        return Node(node.name, node.op, node.inputs, node.outputs, dict(a, ends=[samples, *a["ends"][1:]]))
    if node.op == "reshape":
        shape = list(a["shape"])
        return Node(node.name, node.op, node.inputs, node.outputs, dict(a, shape=[samples, *shape[1:]])) if shape[:1] == [1] else None
    return None


def _foldable(graph: Graph, node: Node) -> bool:
    """Every non-constant input and output has batch dimension 1; a broadcasting op's inputs also have the
    output's rank, so axis 0 meets axis 0 (a constant's axes are aligned from the right, and never reach it)."""
    inputs = [graph.tensors[n] for n in node.inputs if n and graph.tensors[n].data is None]
    rank = len(graph.tensors[node.outputs[0]].shape)
    if not inputs or any(t.shape[:1] != (1,) for t in inputs + [graph.tensors[o] for o in node.outputs]):
        return False
    return node.op not in BROADCASTING or all(len(t.shape) == rank for t in inputs)


def _value(t: Tensor, arr: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return np.asarray(arr).astype(DTYPES[t.dtype], copy=False).reshape(shape)


def run_batch(graph: Graph, feeds: dict[str, np.ndarray], table: dict[str, Impl] | None = None, visit: Visit | None = None) -> dict[str, np.ndarray]:
    """Execute `graph` on S samples: `feeds` holds (S, *input_shape) per input; returns the outputs as (S, *shape).

    `visit(name, values)` sees every input's and every node output's values, (S, *shape), as they are computed.
    """
    table = FLOAT_IMPLS if table is None else table
    if hasattr(table, "bind"):
        table = table.bind(graph)
    counts = {len(np.asarray(feeds[n])) for n in graph.inputs if n in feeds}
    missing = [n for n in graph.inputs if n not in feeds]
    if missing or len(counts) != 1:
        raise KilnError(f"run_batch: need the same number of samples for every input {graph.inputs}")
    samples = counts.pop()
    constants = {k: t.data for k, t in graph.tensors.items() if t.data is not None}
    values: dict[str, np.ndarray] = {}
    for name in graph.inputs:
        t = graph.tensors[name]
        arr = np.asarray(feeds[name])
        if tuple(arr.shape[1:]) != t.shape:
            raise KilnError(f"input {name!r}: samples shaped {tuple(arr.shape)}, model expects (S, *{t.shape})")
        values[name] = _value(t, arr, arr.shape)
        if visit:
            visit(name, values[name])
    last_use = {i: index for index, node in enumerate(graph.nodes) for i in node.inputs}
    for index, node in enumerate(graph.nodes):
        fn = table.get(node.op)
        if fn is None:
            raise KilnError(f"{node_context(index, node.name, node.op, node.source, node.source_name)}: no reference implementation")
        outs = _run_node(graph, node, fn, values, constants, samples)
        for name, arr in zip(node.outputs, outs):
            values[name] = arr
            if visit:
                visit(name, arr)
        for i in node.inputs:
            if i and last_use.get(i) == index and i not in graph.outputs:
                values.pop(i, None)
    return {k: values[k] for k in graph.outputs}


def _run_node(graph: Graph, node: Node, fn: Impl, values: dict[str, np.ndarray], constants: dict[str, np.ndarray],
              samples: int) -> list[np.ndarray]:
    outs_t = [graph.tensors[o] for o in node.outputs]
    folded = _folded(node, len(outs_t[0].shape), samples) if _foldable(graph, node) else None
    if folded is not None:
        ins = [None if not i else constants[i] if i in constants else values[i].reshape(samples, *values[i].shape[2:])
               for i in node.inputs]
        return [_value(t, arr, (samples, *t.shape)) for t, arr in zip(outs_t, fn(folded, ins))]
    per_sample = []
    for s in range(samples):
        ins = [None if not i else constants[i] if i in constants else values[i][s] for i in node.inputs]
        per_sample.append([_value(t, arr, t.shape) for t, arr in zip(outs_t, fn(node, ins))])
    return [np.stack([row[k] for row in per_sample]) for k in range(len(outs_t))]
