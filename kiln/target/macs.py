"""Multiply-accumulate counts of a planned graph, the work measure for instructions per MAC.

Only the ops whose cost is dominated by multiply-accumulates count: conv2d
(OHWI weights), depthwise_conv2d (1HWC weights) and fully_connected ([out, in]
weights), each as output elements times the weights one output element reads.
Weights are the op's second input, before and after lowering alike.
"""
from __future__ import annotations

import math

from kiln.ir.graph import Graph, Node


def node_macs(graph: Graph, node: Node) -> int:
    """Multiply-accumulates of one node (0 for ops that are not MAC-bound)."""
    if node.op not in ("conv2d", "depthwise_conv2d", "fully_connected"):
        return 0
    outputs = graph.tensors[node.outputs[0]].size
    w = graph.tensors[node.inputs[1]].shape
    if node.op == "conv2d":
        return outputs * math.prod(w[1:])
    if node.op == "depthwise_conv2d":
        return outputs * w[1] * w[2]
    return outputs * w[-1]


def graph_macs(graph: Graph) -> int:
    return sum(node_macs(graph, n) for n in graph.nodes)
