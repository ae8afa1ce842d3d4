"""The quantization TFLite Micro reads from each tensor, which depends on how the tensor is used.

TFLM's reader keeps a tensor's scales and zero points only when the file gives both, a zero point
per scale or the first for all (`kiln.frontends.tflite.read`); nothing is checked there. Its kernels
then read:

- the filter of an int8 CONV_2D, DEPTHWISE_CONV_2D or FULLY_CONNECTED: one scale, or one per output
  channel (filter dimension 0, 3 and 0), its quantized dimension naming a dimension of that size
  (`PopulateConvolutionQuantizationParams`, `CalculateOpDataFullyConnected`); its zero points only
  in a per-tensor FULLY_CONNECTED (the per-channel kernels have no filter offset);
- the bias of those: nothing Kiln needs (the kernels scale it by input scale × filter scale; a
  per-tensor FULLY_CONNECTED compares its first scale with that product, a check Kiln does not repeat);
- any other tensor (activations, constant operands): the first scale and zero point (`params`).

`tflm_view` gives each tensor the parameters so read, in the form the converter expects: activations
per tensor, filters per output channel along the kernel's axis with zero points 0 where unread, biases
input scale × filter scale (zero point 0). An int8 constant dequantized for a float operator (a hybrid
file: TFLM runs none) is Kiln's own case: per channel along its quantized dimension. A file is refused
for what TFLM refuses and for what Kiln cannot compute from the fields it reads (a scale that is not a
finite number, a negative one, an activation scale of 0, a per-tensor FULLY_CONNECTED filter zero
point), naming every such tensor at once.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from kiln.errors import KilnError
from kiln.frontends.tflite.read import TflModel, TflOperator, TflQuant, TflTensor

WEIGHTED = {"CONV_2D": 0, "DEPTHWISE_CONV_2D": 3, "FULLY_CONNECTED": 0}  # the filter's output-channel dimension
QUANTIZED = ("INT8", "UINT8", "INT4", "INT16")


class Bad(Exception):
    """Quantization of a tensor that Kiln cannot use; the message is the reason."""


def tflm_view(path: Path, model: TflModel) -> TflModel:
    """`model` with each used tensor's quantization as TFLM reads it; every tensor Kiln cannot use, in one error."""
    filters, biases = _weighted(model)
    consumers: dict[int, list[TflOperator]] = {}
    for op in model.operators:
        for i in op.inputs:
            consumers.setdefault(i, []).append(op)
    used = sorted({i for op in model.operators for i in op.inputs + op.outputs if i >= 0} | set(model.inputs) | set(model.outputs))
    tensors, bad = list(model.tensors), {}
    for i in (i for i in used if i not in biases):
        t = model.tensors[i]
        try:
            if i in filters:
                quant = _filter(t, filters[i])
            elif t.type not in QUANTIZED:
                quant = None
            elif t.data is not None and i in consumers and all(_float_result(model, op) for op in consumers[i]):
                quant = _dequantized(t)
            else:
                quant = _activation(t)
        except Bad as exc:
            bad[i] = f"tensor {i} {t.name!r}{_role(filters.get(i))}: {exc}"
            continue
        tensors[i] = replace(t, quant=quant)
    for i, op in biases.items():
        x, w = (tensors[op.inputs[0]].quant, tensors[op.inputs[1]].quant)
        tensors[i] = replace(model.tensors[i], quant=None if x is None or w is None or op.inputs[1] in bad else _bias(model.tensors[i], x, w))
    if bad:
        raise KilnError(f"{path}: {len(bad)} tensor(s) with quantization Kiln cannot use: " + "; ".join(bad[i] for i in sorted(bad)))
    return TflModel(tensors, model.operators, model.inputs, model.outputs)


def _weighted(model: TflModel) -> tuple[dict[int, TflOperator], dict[int, TflOperator]]:
    """The filters and biases of quantized CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED operators (first use)."""
    filters: dict[int, TflOperator] = {}
    biases: dict[int, TflOperator] = {}
    for op in model.operators:
        if op.code in WEIGHTED and len(op.inputs) > 1 and min(op.inputs[:2]) >= 0 and model.tensors[op.inputs[0]].type in QUANTIZED:
            filters.setdefault(op.inputs[1], op)
            if len(op.inputs) > 2 and op.inputs[2] >= 0:
                biases.setdefault(op.inputs[2], op)
    return filters, biases


def _float_result(model: TflModel, op: TflOperator) -> bool:
    return bool(op.outputs) and model.tensors[op.outputs[0]].type == "FLOAT32"


def _role(op: TflOperator | None) -> str:
    return f" (filter of operator {op.index} {op.code})" if op is not None else ""


def _finite(scale: np.ndarray) -> None:
    if not np.all(np.isfinite(scale)) or np.any(scale < 0):
        raise Bad(f"scales {_short(scale)} must be finite and not negative")


def _short(values: np.ndarray) -> str:
    shown = ", ".join(f"{float(v):g}" for v in values[:4])
    return f"[{shown}{', …' if len(values) > 4 else ''}]"


def _activation(t: TflTensor) -> TflQuant:
    """TFLM's `params`: the first scale and zero point."""
    if t.quant is None:
        raise Bad(f"{t.type} without quantization parameters (TFLM reads them when the file gives scales and zero points)")
    scale = t.quant.scale[:1]
    _finite(scale)
    if t.data is None and scale[0] == 0:
        raise Bad("scale 0")
    return TflQuant(scale, t.quant.zero_point[:1], None)


def _filter(t: TflTensor, op: TflOperator) -> TflQuant | None:
    """One scale, or one per output channel along the kernel's axis; zero points only where TFLM reads them."""
    if t.type not in QUANTIZED:
        return None  # a float filter in a quantized operator: the converter refuses the operator
    if t.quant is None:
        raise Bad("no quantization parameters (TFLM refuses a quantized filter without them)")
    scale, n = t.quant.scale, len(t.quant.scale)
    axis = WEIGHTED[op.code]
    if n > 1:
        dim = t.quant.axis
        if len(t.shape) <= axis or t.shape[axis] != n:
            raise Bad(f"{n} scales for a filter of shape {list(t.shape)} (one, or one per output channel: dimension {axis})")
        if not 0 <= dim < len(t.shape) or t.shape[dim] != n:
            raise Bad(f"{n} scales along dimension {dim} of shape {list(t.shape)} (TFLM needs that dimension of size {n})")
    _finite(scale)
    zero = np.zeros(n, np.int64)
    if op.code == "FULLY_CONNECTED" and n == 1 and t.quant.zero_point[0] != 0:
        raise Bad(f"zero point {int(t.quant.zero_point[0])} (a per-tensor FULLY_CONNECTED filter's zero point counts in TFLM; "
                  "Kiln's kernels take symmetric weights)")
    return TflQuant(scale, zero, axis if n > 1 else None)


def _dequantized(t: TflTensor) -> TflQuant:
    """A constant a float operator reads (hybrid weights): scale × (q − zero point), per channel along its dimension."""
    q = t.quant
    if q is None:
        raise Bad(f"{t.type} constant without quantization parameters")
    if q.axis is not None and not (0 <= q.axis < len(t.shape) and t.shape[q.axis] == len(q.scale)):
        raise Bad(f"{len(q.scale)} scales along dimension {q.axis} of shape {list(t.shape)}")
    _finite(q.scale)
    return q


def _bias(t: TflTensor, x: TflQuant, w: TflQuant) -> TflQuant | None:
    """Input scale × filter scale, zero point 0: the scale TFLM's kernels give the bias (none when it has no such shape)."""
    scale = (np.float64(x.scale[0]) * w.scale.astype(np.float64)).astype(np.float32)
    if len(scale) > 1 and t.shape[:1] != (len(scale),):
        return None
    return TflQuant(scale, np.zeros(len(scale), np.int64), 0 if len(scale) > 1 else None)
