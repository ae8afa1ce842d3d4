"""QDQ models: QuantizeLinear/DequantizeLinear pairs become quantization parameters on float tensors.

The IR keeps a QDQ source as a float graph whose tensors carry the
quantization the source fixed (docs/ir.md):
- an activation `x → QuantizeLinear → DequantizeLinear → y` becomes
  `y = Clip(x, lo, hi)`, the range the quantized type represents, and both
  `x` and `y` carry the pair's parameters. The saturation is part of the
  model: onnxruntime's quantizer deletes a Relu before a QuantizeLinear
  whose range starts at 0. When `x` provably lies in that range already (a
  data-movement or averaging op on inputs clamped to the same parameters),
  `y` is just another name for `x`;
- a constant `DequantizeLinear(q)` (weights, int32 biases) becomes a float32
  constant holding exactly `(q - zero_point) * scale` as onnxruntime computes
  it, with the parameters, so the quantize stage recovers `q`;
- uint8 is restated as int8: the zero point moves down by 128, values stay.
Per-axis parameters keep their axis in the source layout (NCHW/OIHW).
"""
from __future__ import annotations

import numpy as np
import onnx

from kiln.frontends.onnx.context import Converter, OnnxNode, PendingQuantize, Unsupported
from kiln.frontends.onnx.handlers import check, handles
from kiln.ir.graph import QuantParams, Tensor

_RANGES = {np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255), np.dtype(np.int32): (-(2**31), 2**31 - 1)}


@check("QuantizeLinear", "DequantizeLinear")
def _qdq_check(n: OnnxNode, opset: int) -> str | None:
    if n.attrs.get("block_size", 0):
        return "blocked quantization (block_size) is not supported"
    if n.op_type == "DequantizeLinear" and n.attrs.get("output_dtype", 1) != 1:
        return "DequantizeLinear to a type other than float32"
    return None


def _params(cx: Converter, n: OnnxNode, rank: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray, int | None]:
    """Scale (float32), zero point (in the quantized dtype) and axis of a Q or DQ node.

    One scale, whatever its shape, is per tensor (axis None): some tools write
    per-tensor parameters as shape [1] (onnxruntime even a [1] scale with a
    scalar zero point).
    """
    scale = cx.value(n.inputs[1])
    zp_name = n.inputs[2] if len(n.inputs) > 2 else ""
    zp = cx.value(zp_name) if zp_name else np.zeros_like(scale, dtype=dtype)
    if scale is None or zp is None:
        raise Unsupported("scale and zero point must be constants")
    if scale.dtype != np.float32:
        raise Unsupported(f"scale of dtype {scale.dtype} (Kiln supports float32 scales)")
    if zp.dtype not in _RANGES or (zp.dtype == np.int32 and n.op_type == "QuantizeLinear"):
        raise Unsupported(f"quantization to {zp.dtype} (Kiln supports int8 and uint8, and int32 constants)")
    if scale.ndim > 1 or (scale.shape != zp.shape and not scale.size == zp.size == 1):
        raise Unsupported(f"scale shape {scale.shape} and zero point shape {zp.shape} are neither per tensor nor per axis")
    axis = n.attrs.get("axis", 1) % max(rank, 1) if scale.size > 1 else None
    return scale.reshape(-1) if axis is not None else scale.reshape(()), zp.reshape(-1) if axis is not None else zp.reshape(()), axis


def _along(a: np.ndarray, axis: int | None, rank: int) -> np.ndarray:
    shape = [1] * rank
    if axis is not None:
        shape[axis] = -1
    return a.reshape(shape) if rank else a.reshape(())


def dequantize(q: np.ndarray, scale: np.ndarray, zp: np.ndarray, axis: int | None) -> np.ndarray:
    """`(q - zp) * scale` in float32, the arithmetic onnxruntime's DequantizeLinear does."""
    diff = q.astype(np.int64) - _along(zp, axis, q.ndim).astype(np.int64)
    return diff.astype(np.float32) * _along(scale, axis, q.ndim)


def quantize(x: np.ndarray, scale: np.ndarray, zp: np.ndarray, axis: int | None) -> np.ndarray:
    """ONNX QuantizeLinear: float32 division, round half to even, saturate to the zero point's type."""
    lo, hi = _RANGES[zp.dtype]
    q = np.rint(x.astype(np.float32) / _along(scale, axis, x.ndim)) + _along(zp, axis, x.ndim)
    return np.clip(q, lo, hi).astype(zp.dtype)


def quant_params(scale: np.ndarray, zp: np.ndarray, axis: int | None) -> QuantParams:
    """The IR parameters, uint8 restated as int8 (zero point - 128)."""
    shift = 128 if zp.dtype == np.uint8 else 0
    return QuantParams(tuple(scale.ravel().tolist()), tuple(int(z) - shift for z in zp.ravel()), axis)


@handles("QuantizeLinear")
def _quantize_linear(cx: Converter, n: OnnxNode) -> None:
    x = cx.tensor(n.inputs[0])
    if x.dtype != "float32":
        raise Unsupported(f"quantizes a {x.dtype} tensor")
    to = n.attrs.get("output_dtype", 0)
    dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(to)) if to else np.dtype(np.uint8)
    scale, zp, axis = _params(cx, n, len(x.shape), dtype)
    cx.pending[n.outputs[0]] = PendingQuantize(x.name, scale, zp, axis)
    cx.graph.meta["quantized_source"] = "qdq"


@handles("DequantizeLinear")
def _dequantize_linear(cx: Converter, n: OnnxNode) -> None:
    src, out = n.inputs[0], n.outputs[0]
    cx.graph.meta["quantized_source"] = "qdq"
    if src in cx.pending:
        _fold_pair(cx, n, cx.pending[src], out)
        return
    q = cx.value(src)
    if q is None:
        raise Unsupported(f"dequantizes run-time tensor {src!r} (only constants and QuantizeLinear outputs)")
    scale, zp, axis = _params(cx, n, q.ndim, q.dtype)
    if q.dtype != zp.dtype:
        raise Unsupported(f"input dtype {q.dtype} differs from zero point dtype {zp.dtype}")
    cx.values[out] = dequantize(q, scale, zp, axis)
    cx.quant[out] = quant_params(scale, zp, axis)


def _fold_pair(cx: Converter, n: OnnxNode, q: PendingQuantize, out: str) -> None:
    """The DQ undoes its Q: annotate the Q's input (or, for a constant, store its fake-quantized value)."""
    source = cx.tensor(q.source)
    scale, zp, axis = _params(cx, n, len(source.shape), q.zero_point.dtype)
    same = axis == q.axis and np.array_equal(scale, q.scale) and np.array_equal(zp, q.zero_point) and zp.dtype == q.zero_point.dtype
    if not same:
        raise Unsupported("DequantizeLinear parameters differ from its QuantizeLinear's (requantization is not supported)")
    if source.is_constant:
        cx.values[out] = dequantize(quantize(source.data, scale, zp, axis), scale, zp, axis)
        cx.quant[out] = quant_params(scale, zp, axis)
        return
    if axis is not None:
        raise Unsupported("per-axis quantization of a run-time tensor (Kiln quantizes activations per tensor)")
    _fold_activation(cx, n, source, scale, zp, out)


def _fold_activation(cx: Converter, n: OnnxNode, source: Tensor, scale: np.ndarray, zp: np.ndarray, out: str) -> None:
    """`out` = `source` saturated to the quantized range: an alias when it cannot leave it, else a Clip."""
    params = quant_params(scale, zp, None)
    if source.quant is not None and source.quant != params:
        raise Unsupported(f"tensor {source.name!r} is quantized twice with different parameters")
    source.quant = params
    if _in_range(cx, source.name, params):
        cx.alias[out] = source.name
        cx.clamped.add(source.name)
        return
    lo, hi = (dequantize(np.asarray(v, zp.dtype), scale, zp, None) for v in _RANGES[zp.dtype])
    bounds = [cx.const(f"{out}/min", lo, "float32"), cx.const(f"{out}/max", hi, "float32")]
    cx.emit("Clip", [source.name, *bounds], [out], {}, n.name)
    cx.graph.tensors[out].quant = params
    cx.clamped.add(out)


# Ops whose outputs lie in the range of their inputs (0, which every quantized
# range holds, is the only value they may add: padding, averaging with it).
_RANGE_PRESERVING = frozenset({
    "MaxPool", "AveragePool", "GlobalAveragePool", "ReduceMean", "Relu", "Reshape", "Flatten", "Squeeze", "Unsqueeze",
    "Transpose", "Slice", "Split", "Gather", "Resize", "Identity", "Dropout", "Concat",
})


def _in_range(cx: Converter, name: str, params: QuantParams) -> bool:
    """True when tensor `name` cannot leave the range of `params`: made by a range-preserving op from clamped inputs with the same parameters."""
    producer = next((node for node in reversed(cx.graph.nodes) if name in node.outputs), None)
    if producer is None or producer.op not in _RANGE_PRESERVING:
        return False
    data = producer.inputs if producer.op == "Concat" else producer.inputs[:1]
    return all(i in cx.clamped and cx.graph.tensors[i].quant == params for i in data)
