"""The last check of normalize: every node is a kernel op, or the user learns which one is not and why."""
from __future__ import annotations

from kiln.errors import KilnError, node_context
from kiln.ir.graph import Graph
from kiln.ir.ops import OPS

REASONS = {
    "Conv": "needs constant weights and bias and a 1-D or 2-D input",
    "MatMul": "needs a constant weight, or two activations of one rank >= 2 with the same batch dims",
    "Gemm": "needs a constant B (a product of two activations has no kernel), and beta = 1 for a non-constant C",
    "BatchNormalization": "needs constant parameters",
    "ConvTranspose": "is supported only with kernel == stride, no padding, dilation or output padding, one group and float weights",
    "LayerNormalization": "needs a constant scale and bias, and its mean and inverse-deviation outputs unused",
    "Clip": "needs constant bounds",
    "MaxPool": "supports 1-D and 2-D pooling without dilation or an indices output",
    "AveragePool": "supports 1-D and 2-D pooling without dilation",
    "ReduceMean": "is supported only over all spatial axes (a global average pool)",
    "Resize": "is supported only on the spatial axes of a 4-D input",
    "Slice": "needs constant starts/ends/axes/steps, and a backward slice must stop before index 0",
    "Gather": "needs constant scalar or 1-D indices",
    "Pow": "is supported only with a constant exponent 2 (or inside a recognized GELU)",
    "Cast": "has no kernel between different types",
    "Erf": "appears only inside a recognized GELU",
    "Dropout": "is an identity only in inference mode with its mask unused",
    "LRN": "is supported on 4-D (N, C, H, W) inputs",
}


def check(graph: Graph, source: Graph, disabled: list[str]) -> None:
    """Raise KilnError naming the first node that is not a kernel op (index and name as in `source`)."""
    index = {n.name: i for i, n in enumerate(source.nodes)}
    for i, node in enumerate(graph.nodes):
        opdef = OPS.get(node.op)
        if opdef is not None and opdef.level == "kernel":
            continue
        dtype = graph.tensors[node.inputs[0]].dtype if node.inputs and node.inputs[0] else ""
        reason = REASONS.get(node.op, "has no kernel-level equivalent")
        if dtype and dtype not in ("float32", "int8"):
            reason = f"computes on {dtype} values at run time (only float tensors reach the kernels)"
        note = f" (disabled passes: {', '.join(disabled)})" if disabled else ""
        where = node_context(index.get(node.name, i), node.name, node.op, node.source, node.source_name)
        raise KilnError(f"{where}: cannot be brought to kernel form: {node.op} {reason}{note}")
