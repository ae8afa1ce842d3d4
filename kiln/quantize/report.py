"""Accuracy report of a quantized graph against its float graph.

For every int8 activation that the float graph also has (matched by name),
the SQNR of its dequantized int8 values (integer reference) against the float
values (float reference), accumulated over all samples; the same for the
graph outputs; top-1 agreement of the first output; and the float range each
int8 tensor's parameters represent, the layer that writes it (its name in the
source model) and its position in the graph (`index`: inputs first, then node
outputs in order). The dict is JSON-serializable;
`format_report` renders it as a table.
"""
from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from kiln.errors import KilnError
from kiln.ir.graph import Graph
from kiln.quantize.scheme import dequantize_array, quantize_array
from kiln.reference.executor import run


def run_quantized(graph: Graph, feeds: dict[str, np.ndarray], keep: bool = False) -> dict[str, np.ndarray]:
    """Run an int8 graph on float inputs (quantized with each input's parameters) with the integer reference."""
    from kiln.reference.int8 import INT8_IMPLS

    ints = {}
    for name in graph.inputs:
        t = graph.tensors[name]
        ints[name] = quantize_array(feeds[name], t.quant) if t.dtype == "int8" else feeds[name]
    return run(graph, ints, table=INT8_IMPLS.bind(graph), keep=keep)


def _compared(float_graph: Graph, quantized: Graph) -> list[str]:
    return sorted(n for n, t in quantized.tensors.items()
                  if t.dtype == "int8" and not t.is_constant and n in float_graph.tensors
                  and float_graph.tensors[n].dtype == "float32" and float_graph.tensors[n].shape == t.shape)


def _sqnr(signal: float, noise: float) -> float | None:
    """10·log10(signal/noise) in dB; None when undefined (no noise, or no signal)."""
    if noise == 0.0 or signal == 0.0:
        return None
    return round(10.0 * math.log10(signal / noise), 4)


def report(float_graph: Graph, quantized_graph: Graph, samples: dict[str, np.ndarray], inputs: str | None = None) -> dict[str, Any]:
    """Compare the graphs on `samples` (per input, shaped (N, *input_shape)); `inputs` says what the samples are.

    A quantized TFLite source has no float graph: its int8 graph is the source itself (held to
    TFLite Micro bit for bit), so nothing is compared and the report says so.
    """
    if quantized_graph.meta.get("quantized_source") == "tflite":
        return {"model": quantized_graph.name, "samples": 0, "inputs": "no samples", "top1_agreement": 1.0,
                "outputs": {}, "tensors": {},
                "note": "a quantized TFLite source: the int8 graph is the source, there is no float graph to compare with"}
    names = _compared(float_graph, quantized_graph)
    counts = {len(samples[n]) for n in float_graph.inputs if n in samples}
    if len(counts) != 1 or len(samples) < len(float_graph.inputs) or 0 in counts:
        raise KilnError(f"report: need the same number (>= 1) of samples for every input {float_graph.inputs}")
    signal = dict.fromkeys(names, 0.0)
    noise = dict.fromkeys(names, 0.0)
    first_float, first_quant = float_graph.outputs[0], quantized_graph.outputs[0]
    agree = 0
    count = counts.pop()
    for i in range(count):
        feeds = {n: np.asarray(samples[n][i], np.float32) for n in float_graph.inputs}
        ref = run(float_graph, feeds, keep=True)
        got = run_quantized(quantized_graph, feeds, keep=True)
        for n in names:
            f = np.asarray(ref[n], np.float64)
            signal[n] += float(np.sum(f * f))
            noise[n] += float(np.sum((f - dequantize_array(got[n], quantized_graph.tensors[n].quant)) ** 2))
        agree += int(np.array_equal(np.argmax(ref[first_float], axis=-1), np.argmax(got[first_quant], axis=-1)))
    producers = quantized_graph.producers()
    order = {n: i for i, n in enumerate(quantized_graph.inputs + [o for node in quantized_graph.nodes for o in node.outputs])}
    tensors = {n: dict(_tensor_entry(quantized_graph, n, producers, _sqnr(signal[n], noise[n])), index=order[n]) for n in names}
    return {
        "model": quantized_graph.name,
        "samples": count,
        "inputs": inputs or f"{count} given sample{'s' if count != 1 else ''}",
        "top1_agreement": round(agree / count, 6),
        "outputs": {n: tensors[n]["sqnr_db"] for n in quantized_graph.outputs if n in tensors},
        "tensors": tensors,
    }


def _tensor_entry(graph: Graph, name: str, producers: dict, sqnr: float | None) -> dict[str, Any]:
    q = graph.tensors[name].quant
    scale, zp = float(q.scale[0]), int(q.zero_point[0])
    node = producers.get(name)
    return {
        "op": node.op if node is not None else "input",
        "layer": node.label if node is not None else "",
        "scale": scale,
        "zero_point": zp,
        "range": [scale * (-128 - zp), scale * (127 - zp)],
        "sqnr_db": sqnr,
    }


def to_json(rep: dict[str, Any]) -> str:
    """The canonical JSON text of a report (sorted keys)."""
    return json.dumps(rep, sort_keys=True, indent=2) + "\n"


def format_report(rep: dict[str, Any]) -> str:
    """A readable table: one row per compared tensor in graph order, then the summary line."""
    if "note" in rep:
        return f"model {rep['model']}: {rep['note']}\n"
    rows = [("tensor", "layer", "op", "scale", "zp", "range", "SQNR dB")]
    for name in sorted(rep["tensors"], key=lambda n: rep["tensors"][n]["index"]):
        e = rep["tensors"][name]
        sqnr = "exact" if e["sqnr_db"] is None else f"{e['sqnr_db']:.2f}"
        layer = e["layer"] if e["layer"].isprintable() else repr(e["layer"])  # a model file's name cannot drive the terminal
        rows.append((name, layer, e["op"], f"{e['scale']:.6g}", str(e["zero_point"]), f"[{e['range'][0]:.4g}, {e['range'][1]:.4g}]", sqnr))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i < 3 or i == 5 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip() for r in rows]
    outs = ", ".join(f"{n} {'exact' if v is None else f'{v:.2f} dB'}" for n, v in sorted(rep["outputs"].items()))
    lines.append(f"model {rep['model']}: output SQNR {outs}, top-1 agreement {100 * rep['top1_agreement']:.2f}% "
                 f"over {rep['inputs']}")
    return "\n".join(lines) + "\n"
