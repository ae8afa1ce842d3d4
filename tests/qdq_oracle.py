"""Kiln's int8 graph of a QDQ ONNX file against ONNX's own QDQ semantics, layer by layer.

The oracle is `onnx.reference.ReferenceEvaluator`: QuantizeLinear,
DequantizeLinear and the float ops between them in NumPy, with no
CPU-specific kernels (onnxruntime's fused int8 kernels round differently on
CPUs with and without VNNI, so they are no oracle). Each Kiln node runs, in
Kiln's integer reference, on the int8 values the ONNX reference computed for
its inputs, and its output is compared with the ONNX reference's output of
the same tensor. What the arithmetic allows, and so what the tests require:

- `STEPS = 1`: both sides round the same real value to the int8 grid, ONNX
  from a float32 computation and Kiln from an exact integer accumulator with a
  31-bit fixed-point multiplier (TFLite's requantization). Each is within
  half a step (plus its own error) of the real value, so they differ by at
  most one step, and only where the real value lies near a rounding boundary.
- `DIFFERING = 0.01`: the share of elements on the int8 grid of both that
  differ at all. Near-boundary
  values are rare (float32 accumulation error is far below a step); a wrong
  zero point, scale, rounding mode or multiplier moves most elements.
  Measured on the zoo's QDQ files: 0.1-0.4%. Where ONNX keeps a tensor
  in float, or a kernel fixes its output's parameters (softmax, which Kiln
  then requantizes to the file's), Kiln's value is within one step of ONNX's
  float value.

Comparing whole outputs instead would compound those single-step
differences through every later layer of a deep network.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnx.version_converter
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

from kiln.ir.graph import Graph, Tensor
from kiln.quantize.scheme import FIXED_OUTPUT
from kiln.reference.int8 import INT8_IMPLS

STEPS = 1
DIFFERING = 0.01
NCHW_TO_NHWC = (0, 2, 3, 1)
REFERENCE_QDQ_OPSET = 19  # the oldest QuantizeLinear/DequantizeLinear onnx.reference implements (int8 unchanged since 13)


@dataclass(frozen=True)
class Quantized:
    """Where the ONNX graph holds the int8 form of a float tensor, with its parameters in Kiln's int8 terms."""

    ints: str
    scale: float
    zero_point: int
    unsigned: bool


@dataclass(frozen=True)
class Layer:
    node: str
    op: str
    steps: np.ndarray  # |Kiln - ONNX| per output element, in the output's quantization steps
    on_grid: bool  # ONNX quantizes this output too (integer steps); else ONNX's float value is compared


def reference_run(path: Path, feeds: dict[str, np.ndarray], intermediate: bool = False) -> dict[str, np.ndarray]:
    """ONNX's reference evaluation of a QDQ file: the graph outputs, or with `intermediate` every value."""
    model = onnx.load(str(path))
    if next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) < REFERENCE_QDQ_OPSET:
        model = onnx.version_converter.convert_version(model, REFERENCE_QDQ_OPSET)
    evaluator = ReferenceEvaluator(model)
    if intermediate:
        return evaluator.run(None, feeds, intermediate=True)
    return dict(zip(evaluator.output_names, evaluator.run(None, feeds)))


def _quantized_tensors(model: onnx.ModelProto) -> dict[str, Quantized]:
    """Float tensor -> its int8 form: what a QuantizeLinear makes of it, or what a DequantizeLinear made it from."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    found: dict[str, Quantized] = {}
    for n in model.graph.node:
        if n.op_type not in ("QuantizeLinear", "DequantizeLinear") or n.input[0] in inits:
            continue
        zp = inits[n.input[2]] if len(n.input) > 2 and n.input[2] else np.int8(0)
        unsigned = zp.dtype == np.uint8
        ints, flt = (n.output[0], n.input[0]) if n.op_type == "QuantizeLinear" else (n.input[0], n.output[0])
        found.setdefault(flt, Quantized(ints, float(inits[n.input[1]]), int(zp) - (128 if unsigned else 0), unsigned))
    return found


def _nchw(graph: Graph) -> set[str]:
    """4-D activations Kiln keeps in the source's NCHW layout; every other one is NHWC.

    A kernel-level graph turns NCHW into NHWC only with explicit transposes;
    inputs and outputs keep the source's layout unless declared NHWC.
    """
    found = {n for n in graph.inputs + graph.outputs if graph.tensors[n].layout != "NHWC"}
    for n in graph.nodes:
        if n.op == "transpose" and list(n.attrs.get("perm", [])) == [0, 2, 3, 1]:
            found.add(n.inputs[0])
        if n.op == "transpose" and list(n.attrs.get("perm", [])) == [0, 3, 1, 2]:
            found.add(n.outputs[0])
    return found


class _Values:
    """The ONNX reference's values of one run, looked up by Kiln tensor name in Kiln's layout."""

    def __init__(self, path: Path, graph: Graph, feeds: dict[str, np.ndarray]) -> None:
        self.values = reference_run(path, feeds, intermediate=True)
        self.quantized = _quantized_tensors(onnx.load(str(path)))
        self.graph = graph
        self.nchw = _nchw(graph)

    def _kiln_layout(self, t: Tensor, arr: np.ndarray) -> np.ndarray:
        """An NCHW value in Kiln's layout: NHWC for 4-D activations, NHWC order for ones Kiln flattened from NHWC."""
        if arr.ndim == 4 and (t.name not in self.nchw if len(t.shape) == 4 else "/nhwc" in t.name):
            arr = np.transpose(arr, NCHW_TO_NHWC)
        return arr.reshape(t.shape)

    def ints(self, name: str) -> np.ndarray | None:
        """The int8 values ONNX holds for Kiln tensor `name`, when it quantizes it with the same parameters."""
        t, q = self.graph.tensors[name], self.quantized.get(_onnx_name(name))
        if q is None or t.quant is None or self.values[q.ints].size != t.size:
            return None
        if np.float32(t.quant.scale[0]) != np.float32(q.scale) or t.quant.zero_point[0] != q.zero_point:
            return None
        arr = self.values[q.ints].astype(np.int16) - (128 if q.unsigned else 0)
        return self._kiln_layout(t, arr).astype(np.int8)

    def floats(self, name: str, fixed: bool) -> np.ndarray | None:
        """The float values ONNX computes for Kiln tensor `name`, when ONNX never quantizes it or when the
        kernel fixes its parameters (`fixed`: Kiln requantizes it to ONNX's parameters afterwards)."""
        if _onnx_name(name) in self.quantized and not fixed:
            return None
        arr = self.values.get(_onnx_name(name))
        t = self.graph.tensors[name]
        return None if arr is None or np.asarray(arr).size != t.size else self._kiln_layout(t, np.asarray(arr, np.float64))


def _onnx_name(name: str) -> str:
    """The ONNX tensor a Kiln activation comes from: Kiln marks a pre-activation, an NHWC copy or an NHWC
    flattening with a suffix."""
    for suffix in ("/pre", "/flat", "/nhwc"):
        name = name.removesuffix(suffix)
    return name


def layerwise(path: Path, graph: Graph, feeds: dict[str, np.ndarray]) -> list[Layer]:
    """Every Kiln node whose activation inputs ONNX holds in int8, run on those, against ONNX's output."""
    values = _Values(path, graph, feeds)
    table = INT8_IMPLS.bind(graph)
    layers = []
    for node in graph.nodes:
        inputs = [graph.tensors[i].data if i and graph.tensors[i].data is not None else (values.ints(i) if i else None)
                  for i in node.inputs]
        if any(i and x is None for i, x in zip(node.inputs, inputs)):
            continue
        out = graph.tensors[node.outputs[0]]
        got = np.asarray(table[node.op](node, inputs)[0]).reshape(out.shape).astype(np.int64)
        scale, zp = out.quant.scale[0], out.quant.zero_point[0]
        if (want := values.ints(out.name)) is not None:
            layers.append(Layer(node.name, node.op, np.abs(got - want), True))
        elif (real := values.floats(out.name, node.op in FIXED_OUTPUT)) is not None:
            layers.append(Layer(node.name, node.op, np.abs((got - zp) * scale - real) / scale, False))
    return layers
