"""The Kiln IR: graph, tensors, nodes, operator definitions, verifier and `.kir` files."""
from toolchain.ir.graph import DTYPES, Graph, Node, QuantParams, Tensor, dtype_name
from toolchain.ir.serialize import dumps, load, loads, save

__all__ = ["DTYPES", "Graph", "Node", "QuantParams", "Tensor", "dtype_name", "dumps", "load", "loads", "save"]
