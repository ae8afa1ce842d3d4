"""Core-ATen ops onto ONNX-named source ops (NCHW, ONNX semantics), one handler per overload.

Shapes, axes and bounds that ONNX takes as inputs (Reshape shape, Clip
bounds, Slice/Split/Pad/ReduceMean/Squeeze arguments, Resize scales) become
int64 or float32 constants named after the FX node, as ONNX opset 18+ has
them; shapes are the static ones torch traced.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from kiln.frontends.torch_emit import HANDLERS, Emitter, Unsupported, aten

__all__ = ["HANDLERS"]


def _axis(dim: int, rank: int) -> int:
    return dim % rank if rank else 0


def _pair(values: Any, name: str) -> list[int]:
    """A 2-D pooling argument (int or 1- or 2-list) as two ints."""
    values = [int(values)] if isinstance(values, int) else [int(v) for v in values]
    if len(values) == 1:
        values = values * 2
    if len(values) != 2:
        raise Unsupported(f"{name} {values} is not 2-D")
    return values


# -- convolution and matrix products ------------------------------------------
@aten("convolution.default")
def _convolution(e: Emitter, a: dict[str, Any]) -> None:
    spatial = len(a["stride"])
    if a["transposed"]:
        return _conv_transpose(e, a, spatial)
    if spatial not in (1, 2):
        raise Unsupported(f"{spatial}-D convolution is not supported (1-D and 2-D are)")
    inputs = [e.tensor(a["input"]), e.tensor(a["weight"])]
    if a["bias"] is not None:
        inputs.append(e.tensor(a["bias"]))
    padding = [int(p) for p in a["padding"]]
    attrs = {
        "kernel_shape": list(e.shape(a["weight"])[2:]),
        "strides": [int(s) for s in a["stride"]],
        "pads": padding + padding,
        "dilations": [int(d) for d in a["dilation"]],
        "group": int(a["groups"]),
    }
    e.finish("Conv", inputs, attrs)


def _conv_transpose(e: Emitter, a: dict[str, Any], spatial: int) -> None:
    if spatial != 2:
        raise Unsupported(f"{spatial}-D transposed convolution is not supported (2-D is)")
    inputs = [e.tensor(a["input"]), e.tensor(a["weight"])] + ([e.tensor(a["bias"])] if a["bias"] is not None else [])
    padding = [int(p) for p in a["padding"]]
    e.finish("ConvTranspose", inputs, {"strides": [int(s) for s in a["stride"]], "pads": padding + padding,
                                       "dilations": [int(d) for d in a["dilation"]], "group": int(a["groups"]),
                                       "output_padding": [int(p) for p in a["output_padding"]]})


@aten("linear.default")
def _linear(e: Emitter, a: dict[str, Any]) -> None:
    x, w = e.tensor(a["input"]), e.tensor(a["weight"])
    bias = [e.tensor(a["bias"])] if a["bias"] is not None else []
    if len(e.shape(a["input"])) == 2:
        e.finish("Gemm", [x, w] + bias, {"transB": 1})
        return
    weights = e.graph.tensors[w]
    if weights.is_constant:
        wt = e.const("weight_t", weights.data.T)
    else:
        wt = e.step("Transpose", [w], {"perm": [1, 0]}, "weight_t")
    if not bias:
        e.finish("MatMul", [x, wt])
        return
    y = e.step("MatMul", [x, wt], {}, "matmul")
    e.finish("Add", [y] + bias)


@aten("addmm.default")
def _addmm(e: Emitter, a: dict[str, Any]) -> None:
    inputs = [e.tensor(a["mat1"]), e.tensor(a["mat2"]), e.tensor(a["self"])]
    e.finish("Gemm", inputs, {"alpha": float(a["alpha"]), "beta": float(a["beta"])})


@aten("mm.default", "bmm.default")
def _matmul(e: Emitter, a: dict[str, Any]) -> None:
    e.finish("MatMul", [e.tensor(a["self"]), e.tensor(a["mat2"])])


@aten("_native_batch_norm_legit_no_training.default")
def _batch_norm(e: Emitter, a: dict[str, Any]) -> None:
    channels = e.shape(a["input"])[1]
    scale = e.tensor(a["weight"]) if a["weight"] is not None else e.const("scale", np.ones(channels, np.float32))
    bias = e.tensor(a["bias"]) if a["bias"] is not None else e.const("bias", np.zeros(channels, np.float32))
    inputs = [e.tensor(a["input"]), scale, bias, e.tensor(a["running_mean"]), e.tensor(a["running_var"])]
    e.finish("BatchNormalization", inputs, {"epsilon": float(a["eps"])})


@aten("native_layer_norm.default")
def _layer_norm(e: Emitter, a: dict[str, Any]) -> None:
    shape = e.shape(a["input"])
    inner = tuple(int(d) for d in a["normalized_shape"])
    scale = e.tensor(a["weight"]) if a["weight"] is not None else e.const("scale", np.ones(inner, np.float32))
    bias = e.tensor(a["bias"]) if a["bias"] is not None else e.const("bias", np.zeros(inner, np.float32))
    e.finish("LayerNormalization", [e.tensor(a["input"]), scale, bias], {"axis": len(shape) - len(inner), "epsilon": float(a["eps"])})


# -- activations ---------------------------------------------------------------
def _unary(op: str, *names: str, **attrs: Any) -> None:
    aten(*names)(lambda e, a: e.finish(op, [e.tensor(a["self"])], attrs))


_unary("Relu", "relu.default")
_unary("Sigmoid", "sigmoid.default")
_unary("Tanh", "tanh.default")
_unary("HardSigmoid", "hardsigmoid.default", alpha=1.0 / 6.0, beta=0.5)
_unary("HardSwish", "hardswish.default")
_unary("Sqrt", "sqrt.default")
_unary("Exp", "exp.default")
_unary("Neg", "neg.default")
_unary("Reciprocal", "reciprocal.default")
_unary("Erf", "erf.default")
_unary("Identity", "clone.default", "alias.default")


@aten("hardtanh.default", "clamp.default")
def _clip(e: Emitter, a: dict[str, Any]) -> None:
    low, high = (a["min_val"], a["max_val"]) if "min_val" in a else (a["min"], a["max"])
    dtype = e.out_dtype()
    bounds = [e.operand(v, dtype, hint) if v is not None else "" for v, hint in ((low, "min"), (high, "max"))]
    e.finish("Clip", [e.tensor(a["self"])] + bounds)


@aten("leaky_relu.default")
def _leaky_relu(e: Emitter, a: dict[str, Any]) -> None:
    e.finish("LeakyRelu", [e.tensor(a["self"])], {"alpha": float(a["negative_slope"])})


@aten("silu.default")
def _silu(e: Emitter, a: dict[str, Any]) -> None:
    x = e.tensor(a["self"])
    e.finish("Mul", [x, e.step("Sigmoid", [x], {}, "sigmoid")])


@aten("gelu.default")
def _gelu(e: Emitter, a: dict[str, Any]) -> None:
    e.finish("Gelu", [e.tensor(a["self"])], {"approximate": str(a["approximate"])})


@aten("rsqrt.default")
def _rsqrt(e: Emitter, a: dict[str, Any]) -> None:
    e.finish("Reciprocal", [e.step("Sqrt", [e.tensor(a["self"])], {}, "sqrt")])


@aten("_softmax.default", "_safe_softmax.default")
def _softmax(e: Emitter, a: dict[str, Any]) -> None:
    """`_safe_softmax` (scaled_dot_product_attention's) differs only on rows that are -inf throughout (fully
    masked), which a quantized model cannot hold: it is Softmax."""
    e.finish("Softmax", [e.tensor(a["self"])], {"axis": _axis(a["dim"], len(e.shape(a["self"])))})


# -- elementwise arithmetic ------------------------------------------------------
def _binary(op: str, *names: str) -> None:
    def handler(e: Emitter, a: dict[str, Any]) -> None:
        dtype = e.out_dtype()
        lhs = e.operand(a["self"], dtype, "lhs")
        rhs = e.operand(a["other"], dtype, "rhs")
        alpha = a.get("alpha", 1)
        if alpha not in (None, 1):
            rhs = e.step("Mul", [rhs, e.operand(alpha, dtype, "alpha")], {}, "scaled")
        e.finish(op, [lhs, rhs])

    aten(*names)(handler)


_binary("Add", "add.Tensor", "add.Scalar")
_binary("Sub", "sub.Tensor", "sub.Scalar")
_binary("Mul", "mul.Tensor", "mul.Scalar")
_binary("Div", "div.Tensor", "div.Scalar")


@aten("pow.Tensor_Scalar", "pow.Tensor_Tensor")
def _pow(e: Emitter, a: dict[str, Any]) -> None:
    dtype = e.out_dtype()
    e.finish("Pow", [e.operand(a["self"], dtype, "base"), e.operand(a["exponent"], dtype, "exponent")])


# -- pooling -----------------------------------------------------------------------
def _pool_attrs(e: Emitter, a: dict[str, Any]) -> dict[str, Any]:
    if len(e.shape(a["self"])) != 4:
        raise Unsupported(f"pooling expects a 4-D NCHW input, got shape {list(e.shape(a['self']))}")
    kernel = _pair(a["kernel_size"], "kernel_size")
    stride = _pair(a["stride"], "stride") if a["stride"] else kernel
    pad = _pair(a["padding"], "padding")
    return {"kernel_shape": kernel, "strides": stride, "pads": pad + pad, "ceil_mode": int(bool(a["ceil_mode"]))}


@aten("max_pool2d.default")
def _max_pool(e: Emitter, a: dict[str, Any]) -> None:
    attrs = _pool_attrs(e, a)
    attrs["dilations"] = _pair(a["dilation"], "dilation")
    e.finish("MaxPool", [e.tensor(a["self"])], attrs)


@aten("avg_pool2d.default")
def _avg_pool(e: Emitter, a: dict[str, Any]) -> None:
    if a["divisor_override"] is not None:
        raise Unsupported("avg_pool2d with divisor_override is not supported")
    attrs = _pool_attrs(e, a)
    attrs["count_include_pad"] = int(bool(a["count_include_pad"]))
    e.finish("AveragePool", [e.tensor(a["self"])], attrs)


@aten("adaptive_avg_pool2d.default")
def _adaptive_avg_pool(e: Emitter, a: dict[str, Any]) -> None:
    shape = e.shape(a["self"])
    out = _pair(a["output_size"], "output_size")
    if len(shape) != 4:
        raise Unsupported(f"expects a 4-D NCHW input, got shape {list(shape)}")
    if out == [1, 1]:
        e.finish("GlobalAveragePool", [e.tensor(a["self"])])
        return
    h, w = shape[2:]
    if h % out[0] or w % out[1]:
        raise Unsupported(f"adaptive pooling of {h}x{w} to {out[0]}x{out[1]} has uneven windows")
    kernel = [h // out[0], w // out[1]]
    e.finish("AveragePool", [e.tensor(a["self"])], {"kernel_shape": kernel, "strides": kernel})


@aten("mean.dim")
def _mean(e: Emitter, a: dict[str, Any]) -> None:
    rank = len(e.shape(a["self"]))
    dims = a["dim"] if a["dim"] else list(range(rank))
    axes = sorted(_axis(d, rank) for d in dims)
    e.finish("ReduceMean", [e.tensor(a["self"]), e.ints("axes", axes)], {"keepdims": int(bool(a["keepdim"]))})


# -- data movement ---------------------------------------------------------------------
@aten("view.default")
def _reshape(e: Emitter, a: dict[str, Any]) -> None:
    shape = [int(d) for d in e.fx.meta["val"].shape]
    e.finish("Reshape", [e.tensor(a["self"]), e.ints("shape", shape)])


@aten("squeeze.dims")
def _squeeze(e: Emitter, a: dict[str, Any]) -> None:
    shape = e.shape(a["self"])
    axes = sorted({_axis(d, len(shape)) for d in a["dim"] if shape[_axis(d, len(shape))] == 1})
    if not axes:  # torch leaves dimensions that are not 1 alone
        e.finish("Identity", [e.tensor(a["self"])])
        return
    e.finish("Squeeze", [e.tensor(a["self"]), e.ints("axes", axes)])


@aten("unsqueeze.default")
def _unsqueeze(e: Emitter, a: dict[str, Any]) -> None:
    rank = len(e.shape(a["self"])) + 1
    e.finish("Unsqueeze", [e.tensor(a["self"]), e.ints("axes", [_axis(a["dim"], rank)])])


@aten("permute.default")
def _permute(e: Emitter, a: dict[str, Any]) -> None:
    rank = len(e.shape(a["self"]))
    e.finish("Transpose", [e.tensor(a["self"])], {"perm": [_axis(d, rank) for d in a["dims"]]})


@aten("cat.default")
def _cat(e: Emitter, a: dict[str, Any]) -> None:
    dtype = e.out_dtype()
    inputs = [e.operand(t, dtype, f"input{i}") for i, t in enumerate(a["tensors"])]
    e.finish("Concat", inputs, {"axis": _axis(a["dim"], len(e.fx.meta["val"].shape))})


@aten("_to_copy.default")
def _to_copy(e: Emitter, a: dict[str, Any]) -> None:
    x = e.tensor(a["self"])
    dtype = e.out_dtype()
    if e.graph.tensors[x].dtype == dtype:
        e.finish("Identity", [x])
    else:
        e.finish("Cast", [x], {"to": dtype})


@aten("expand.default")
def _expand(e: Emitter, a: dict[str, Any]) -> None:
    if tuple(e.fx.meta["val"].shape) != e.shape(a["self"]):
        raise Unsupported("expand that broadcasts is not supported; rely on broadcasting in arithmetic instead")
    e.finish("Identity", [e.tensor(a["self"])])


@aten("slice.Tensor")
def _slice(e: Emitter, a: dict[str, Any]) -> None:
    shape = e.shape(a["self"])
    dim = _axis(a["dim"], len(shape))
    start, end, step = slice(a["start"], a["end"], a["step"]).indices(shape[dim])
    inputs = [e.tensor(a["self"]), e.ints("starts", [start]), e.ints("ends", [end]), e.ints("axes", [dim]), e.ints("steps", [step])]
    e.finish("Slice", inputs)


@aten("select.int")
def _select(e: Emitter, a: dict[str, Any]) -> None:
    shape = e.shape(a["self"])
    dim = _axis(a["dim"], len(shape))
    index = range(shape[dim])[a["index"]]
    inputs = [e.tensor(a["self"]), e.ints("starts", [index]), e.ints("ends", [index + 1]), e.ints("axes", [dim])]
    e.finish("Squeeze", [e.step("Slice", inputs, {}, "slice"), e.ints("squeeze_axes", [dim])])


@aten("split.Tensor", "split_with_sizes.default")
def _split(e: Emitter, a: dict[str, Any]) -> None:
    dim = _axis(a["dim"], len(e.shape(a["self"])))
    sizes = [int(v.shape[dim]) for v in e.fx.meta["val"]]
    e.finish("Split", [e.tensor(a["self"]), e.ints("split", sizes)], {"axis": dim}, count=len(sizes))


@aten("constant_pad_nd.default")
def _pad(e: Emitter, a: dict[str, Any]) -> None:
    rank = len(e.shape(a["self"]))
    pad = [int(p) for p in a["pad"]]
    begins, ends = [0] * rank, [0] * rank
    for i in range(len(pad) // 2):  # torch lists (begin, end) pairs from the last dimension backwards
        begins[rank - 1 - i], ends[rank - 1 - i] = pad[2 * i], pad[2 * i + 1]
    value = e.operand(float(a["value"]), e.out_dtype(), "value")
    e.finish("Pad", [e.tensor(a["self"]), e.ints("pads", begins + ends), value], {"mode": "constant"})


@aten("full.default", "arange.start_step")
def _factory(e: Emitter, a: dict[str, Any]) -> None:
    """A tensor built from literals in forward() (torch.ones(5), torch.arange(4)) is a constant."""
    e.alias([e.const_from(e.fx.target(*e.fx.args, **e.fx.kwargs))])


@aten("upsample_nearest2d.vec")
def _upsample_nearest(e: Emitter, a: dict[str, Any]) -> None:
    shape = e.shape(a["input"])
    attrs = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    if a["scale_factors"]:
        scales = np.asarray([1.0, 1.0] + [float(s) for s in a["scale_factors"]], np.float32)
        e.finish("Resize", [e.tensor(a["input"]), "", e.const("scales", scales)], attrs)
    else:
        sizes = list(shape[:2]) + [int(s) for s in a["output_size"]]
        e.finish("Resize", [e.tensor(a["input"]), "", "", e.ints("sizes", sizes)], attrs)
