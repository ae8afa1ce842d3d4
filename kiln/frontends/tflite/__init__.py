"""The TFLite frontend: a .tflite file into a kernel-level Kiln graph (NHWC, as the file has it).

- A quantized file (int8 activations: full-integer, per-channel or per-tensor, with int8 or
  float inputs and outputs) becomes an int8 graph that keeps every scale, zero point, int32
  bias, fused activation and the file's io types; `meta["quantized_source"] = "tflite"` tells
  normalize and quantize to keep it as it is (docs/tflite.md). Its results are TFLite Micro's,
  bit for bit.
- A float file becomes a float graph that Kiln calibrates and quantizes like any float model.
  A dynamic-range ("hybrid") file's int8 weights and a float16 file's weights are dequantized
  to float32 first; `meta["tflite"]` says which kind the file was and `meta["tflite_note"]` what
  Kiln did with it (`kiln inspect` shows both).

Tensor names are the file's (made unique with the tensor index); node names are
`<operator>_<index>`. Every tensor whose quantization Kiln cannot use (as TFLM reads it: `quant.py`) is named
at once, in one line; then every operator that cannot be imported, one line each.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from kiln.errors import KilnError, did_you_mean
from kiln.frontends.imported import Imported
from kiln.frontends.tflite.convert import HANDLERS, Converter, Unsupported
from kiln.frontends.tflite.quant import tflm_view
from kiln.frontends.tflite.read import TflModel, read_tflite
from kiln.ir.graph import Graph
from kiln.ir.verify import VerifyError, verify

KINDS = {"int8": "int8 (quantized; kept bit-exact with TFLite Micro)", "float": "float (Kiln quantizes it)",
         "hybrid": "hybrid (int8 weights dequantized to float32; Kiln quantizes it)",
         "float16": "float16 weights (dequantized to float32; Kiln quantizes it)"}


def import_tflite(source: Path, name: str, inputs: dict[str, Any]) -> Imported:
    """Import `source` as graph `name`; `inputs` is the model.toml `inputs` table (checked against the file)."""
    model = tflm_view(source, read_tflite(source))
    cx = Converter(model, Graph(name))
    problems = []
    for op in model.operators:
        handler = HANDLERS.get(op.code)
        try:
            if handler is None:
                raise Unsupported("custom operators are not supported" if op.code.startswith("CUSTOM") else "operator not supported by Kiln")
            handler(cx, op)
        except Unsupported as exc:
            problems.append(f"operator {op.index} {op.code}: {exc}")
    if problems:
        raise KilnError(f"{source}: {len(problems)} operator(s) cannot be imported:\n" + "\n".join(problems))
    graph = cx.graph
    try:
        graph.inputs = [cx.name(i) for i in model.inputs]
        graph.outputs = [cx.name(i) for i in model.outputs]
    except Unsupported as exc:
        raise KilnError(f"{source}: model input/output {exc}") from None
    _check_io(source, model, graph, inputs)
    graph.meta["tflite"] = _kind(cx, graph)
    graph.meta["tflite_note"] = KINDS[graph.meta["tflite"]]
    if graph.meta["tflite"] == "int8":
        graph.meta["quantized_source"] = "tflite"
    graph.remove_unused_tensors()
    try:
        verify(graph, levels=("kernel",))
    except VerifyError as exc:
        raise KilnError(f"{source}: {exc}") from None
    return Imported(graph)


def _kind(cx: Converter, graph: Graph) -> str:
    activations = [t for t in graph.tensors.values() if not t.is_constant]
    if any(t.dtype == "int8" for t in activations):
        return "int8"
    if cx.hybrid:
        return "hybrid"
    return "float16" if any(t.type == "FLOAT16" for t in cx.model.tensors) else "float"


def _check_io(source: Path, model: TflModel, graph: Graph, inputs: dict[str, Any]) -> None:
    """model.toml may restate an input's shape and dtype; it must agree with the file, whose shapes are static."""
    unknown = sorted(set(inputs) - set(graph.inputs))
    if unknown:
        raise KilnError(f"{source}: inputs {', '.join(map(repr, unknown))} in model.toml are not inputs of the model"
                        f"{did_you_mean(unknown[0], graph.inputs)} (it has {', '.join(map(repr, graph.inputs))})")
    for name in graph.inputs:
        t, want = graph.tensors[name], inputs.get(name) or {}
        if t.is_constant:
            raise KilnError(f"{source}: model input {name!r} is a constant")
        if "shape" in want and tuple(want["shape"]) != t.shape:
            raise KilnError(f"{source}: input {name!r}: model.toml gives shape {list(want['shape'])}, the file has {list(t.shape)}")
        if "dtype" in want and want["dtype"] != t.dtype:
            raise KilnError(f"{source}: input {name!r}: model.toml gives dtype {want['dtype']}, the file has {t.dtype}")
