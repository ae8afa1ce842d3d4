"""Write a source-level float graph (an imported graph, or a part of one: `kiln extract`) as an ONNX file.

Source ops are ONNX's own in the form of their newest version (`kiln/ir/source_ops.py`), so every node is
written as it is — op type, inputs, outputs, attributes — but for the two attributes the IR keeps in its own
terms: Cast `to` and ConstantOfShape `dtype` are IR dtype names (and ConstantOfShape's `value` a number).
Constants are initializers; every other tensor's shape and type is declared. A graph whose tensors carry
quantization parameters (a QDQ source) is refused: they came from QuantizeLinear/DequantizeLinear pairs the
import folded into the tensors, which this writer does not rebuild.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from kiln.ir.graph import DTYPES, Graph

OPSET = 21  # Gelu (20), Resize's and Split's newest attributes (18, 19); 21 changes no semantics Kiln reads
IR_VERSION = 10  # what opset 21 needs


class NotWritable(Exception):
    """The graph has something this writer cannot state in ONNX exactly."""


def onnx_type(dtype: str) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(DTYPES[dtype]))


def _attrs(node) -> dict:
    attrs = {k: v for k, v in node.attrs.items() if not (isinstance(v, list) and not v)}  # an empty list has no ONNX type
    if node.op == "Cast":
        attrs["to"] = onnx_type(attrs["to"])
    if node.op == "ConstantOfShape":
        dtype = attrs.pop("dtype")
        attrs["value"] = numpy_helper.from_array(np.array([attrs["value"]], DTYPES[dtype]), "value")
    return attrs


def canonical_attrs(node, graph: Graph) -> dict:
    """A source node's attributes as ONNX states them, so two frontends' forms of one node compare equal: the
    schema's defaults filled in, what ONNX leaves implicit left out (a conv's `kernel_shape`, its weights' shape;
    strides and dilations of 1, pads of 0), floats as float32 (an ONNX float attribute is float32; a PyTorch
    source's float64 one, a batch norm's epsilon, is rounded to it)."""
    schema = onnx.defs.get_schema(node.op, OPSET)
    attrs = {k: helper.get_attribute_value(a.default_value) for k, a in schema.attributes.items() if a.default_value.type}
    attrs |= node.attrs
    if node.op in ("Conv", "ConvTranspose") and attrs.get("kernel_shape") == list(graph.tensors[node.inputs[1]].shape[2:]):
        del attrs["kernel_shape"]
    for key, unset in (("strides", 1), ("dilations", 1), ("pads", 0)):  # per-axis lists whose absence means these
        if key in attrs and all(v == unset for v in attrs[key]):
            del attrs[key]

    def rounded(v):
        return [rounded(x) for x in v] if isinstance(v, list) else float(np.float32(v)) if isinstance(v, float) else v

    return {k: rounded(v.decode() if isinstance(v, bytes) else v) for k, v in attrs.items()}


def to_onnx(graph: Graph) -> bytes:
    """The graph as a serialized ONNX model (raises NotWritable)."""
    quantized = sorted(name for name, t in graph.tensors.items() if t.quant is not None)
    if quantized:
        raise NotWritable(f"tensor {quantized[0]!r} carries quantization parameters (a QDQ source); only float graphs are written")
    for node in graph.nodes:
        if not node.op[:1].isupper():
            raise NotWritable(f"node {node.name!r}: {node.op} is a kernel op, not an ONNX one")

    def info(name: str) -> onnx.ValueInfoProto:
        t = graph.tensors[name]
        return helper.make_tensor_value_info(name, onnx_type(t.dtype), list(t.shape))

    constants = [numpy_helper.from_array(np.asarray(t.data, DTYPES[t.dtype]), name)
                 for name, t in sorted(graph.tensors.items()) if t.is_constant]
    inner = sorted(name for name, t in graph.tensors.items()
                   if not t.is_constant and name not in graph.inputs and name not in graph.outputs)
    nodes = [helper.make_node(n.op, list(n.inputs), list(n.outputs), name=n.name, **_attrs(n)) for n in graph.nodes]
    body = helper.make_graph(nodes, graph.name, [info(n) for n in graph.inputs], [info(n) for n in graph.outputs],
                             constants, value_info=[info(n) for n in inner])
    model = helper.make_model(body, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="kiln")
    model.ir_version = IR_VERSION
    try:
        onnx.checker.check_model(model, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise NotWritable(str(exc).strip().splitlines()[0]) from None
    return model.SerializeToString()
