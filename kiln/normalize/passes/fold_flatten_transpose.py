"""Flatten before a linear layer: permute the weight columns instead of transposing activations.

fully_connected(reshape(transpose(x, p), [N, F]), W) equals
fully_connected(reshape(x, [N, F]), W') where W' reorders W's columns by
the permutation the transpose applies to each flattened row. This is what
lets an NHWC feature map feed a classifier trained on NCHW flattening with
no runtime transpose.
"""
from __future__ import annotations

import numpy as np

from kiln.ir.graph import Graph
from kiln.normalize.rewrite import Rewriter, permute_quant, reshape_quant


def run(graph: Graph) -> tuple[Graph, bool]:
    rw = Rewriter(graph)
    for fc in rw.walk():
        flat = rw.producer(fc.inputs[0]) if fc.op == "fully_connected" else None
        moved = rw.producer(flat.inputs[0]) if flat is not None and flat.op == "reshape" else None
        if moved is None or moved.op != "transpose" or moved.attrs["perm"][0] != 0 or rw.const(fc.inputs[1]) is None:
            continue
        w = rw.tensor(fc.inputs[1])
        x = rw.tensor(moved.inputs[0])
        n, f = rw.tensor(fc.inputs[0]).shape
        if x.shape[0] != n:
            continue
        index = np.arange(f).reshape(x.shape[1:]).transpose([p - 1 for p in moved.attrs["perm"][1:]]).ravel()
        order = np.argsort(index)
        columns = np.take(w.data, order, axis=1)  # C-ordered, unlike w.data[:, order]: no second copy to make it so
        weights = rw.constant(f"{w.name}/permuted", columns, quant=permute_quant(w.quant, 1, order), layout=w.layout)
        rows = rw.tensor_like(f"{x.name}/flat", (n, f), x.dtype, reshape_quant(x.quant, x.shape, (n, f)))
        reshape = rw.node(f"{flat.name}/flat", "reshape", [x.name], [rows], {"shape": [n, f]}, flat)
        rw.replace(fc, [reshape, fc.copy(inputs=[rows, weights, *fc.inputs[2:]])])
    return rw.finish()
