"""Runs a graph node by node with the NumPy implementations registered per op."""
from __future__ import annotations

import numpy as np

from kiln.errors import KilnError, node_context
from kiln.ir.graph import DTYPES, Graph
from kiln.reference import float_ops, source_ops  # noqa: F401  (register implementations)
from kiln.reference.impls import FLOAT_IMPLS, Impl


def run(graph: Graph, feeds: dict[str, np.ndarray], table: dict[str, Impl] | None = None, keep: bool = False) -> dict[str, np.ndarray]:
    """Execute `graph` on `feeds` (one array per graph input).

    Returns the graph outputs, or with `keep` every tensor's value (for
    per-layer comparisons and calibration).
    """
    table = FLOAT_IMPLS if table is None else table
    if hasattr(table, "bind"):  # a table whose implementations read tensor metadata (quantization)
        table = table.bind(graph)
    values: dict[str, np.ndarray] = {k: t.data for k, t in graph.tensors.items() if t.data is not None}
    for name in graph.inputs:
        if name not in feeds:
            raise KilnError(f"missing input {name!r}")
        t = graph.tensors[name]
        arr = np.asarray(feeds[name])
        if tuple(arr.shape) != t.shape:
            raise KilnError(f"input {name!r}: shape {tuple(arr.shape)}, model expects {t.shape}")
        values[name] = arr.astype(DTYPES[t.dtype], copy=False)
    last_use = {i: index for index, node in enumerate(graph.nodes) for i in node.inputs}
    for index, node in enumerate(graph.nodes):
        fn = table.get(node.op)
        if fn is None:
            raise KilnError(f"{node_context(index, node.name, node.op, node.source, node.source_name)}: no reference implementation")
        outs = fn(node, [values[i] if i else None for i in node.inputs])
        for name, arr in zip(node.outputs, outs):
            t = graph.tensors[name]
            values[name] = np.asarray(arr).astype(DTYPES[t.dtype], copy=False).reshape(t.shape)
        if not keep:
            for i in node.inputs:
                if i and last_use.get(i) == index and i not in graph.outputs and graph.tensors[i].data is None:
                    values.pop(i, None)
    return values if keep else {k: values[k] for k in graph.outputs}
