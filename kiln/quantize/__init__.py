"""The quantize stage: a kernel-level float graph into the int8 graph that docs/ir.md specifies.

A quantized TFLite source passes through unchanged: its file fixed everything.

1. Decide which nodes run in int8 (every node of a float source; the nodes a
   QDQ source quantized) and which float tensors get int8 parameters.
2. Calibrate: the float reference runs the calibration samples and an
   observer turns each quantized tensor's values into a range.
3. Group the tensors that must share parameters; pin the groups whose
   parameters are fixed (source QDQ parameters, softmax/sigmoid/tanh
   outputs), requantizing where two constraints disagree; every other group
   gets the union of its members' ranges.
4. Rewrite: int8 activations, int8 weights, int32 biases, and explicit
   quantize/dequantize nodes at the boundaries of float islands.

The stage is pure (it works on a copy) and deterministic.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from kiln.errors import KilnError
from kiln.ir.graph import Graph
from kiln.quantize.calibration import missing_calibration_error, observe_ranges
from kiln.quantize.groups import build_groups, group_params, plan_int8, unfixed
from kiln.quantize.rewrite import rewrite

__all__ = ["quantize"]


def quantize(graph: Graph, config: dict[str, Any], calibration: dict[str, np.ndarray]) -> Graph:
    """The int8 form of `graph` (`config` is the model.toml `quant` table, defaults filled in)."""
    g = graph.copy()
    if g.meta.get("quantized_source") == "tflite":
        if config["mode"] == "none":
            raise KilnError(f"model {g.name!r}: quant.mode = \"none\", but the TFLite source is already quantized to int8")
        return g  # the file fixed every parameter, table and bias (docs/tflite.md)
    if config["mode"] == "none":
        return g
    for index, node in enumerate(g.nodes):
        if node.op in ("quantize", "dequantize"):
            raise KilnError(f"graph {g.name!r}: node {index} {node.name!r} ({node.op}): the graph is already quantized")
    plan = plan_int8(g)
    if not calibration and g.meta.get("quantized_source") != "qdq":
        raise missing_calibration_error(g)
    observed = [n for n in sorted(plan.quantized) if not g.tensors[n].is_constant]
    ranges = observe_ranges(g, calibration, observed, config) if calibration else {}
    groups = build_groups(g, plan, ranges)
    needed = [n for n in unfixed(g, groups) if n not in ranges]
    if needed:
        raise KilnError(f"model {g.name!r}: the QDQ source gives no quantization parameters for tensor(s) {', '.join(needed)}; "
                        "provide calibration data (calibration_data() in model.py or quant.calibration in model.toml) to fill them")
    rewrite(g, plan, group_params(groups), config["per_channel"])
    return g
