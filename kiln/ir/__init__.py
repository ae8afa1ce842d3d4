"""The Kiln IR: graph, tensors, nodes, operator definitions, verifier and `.kir` files."""
from kiln.ir import kernel_ops, source_ops  # noqa: F401  (define every op of OPS)
from kiln.ir.graph import DTYPES, Graph, Node, QuantParams, Tensor, dtype_name
from kiln.ir.serialize import dumps, load, loads, save

__all__ = ["DTYPES", "Graph", "Node", "QuantParams", "Tensor", "dtype_name", "dumps", "load", "loads", "save"]
