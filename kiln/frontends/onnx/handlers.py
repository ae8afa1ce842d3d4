"""ONNX nodes to Kiln source ops, one handler per ONNX op type.

A handler turns an ONNX node of any supported opset into the source op's
canonical form (see the source section of `kiln/ir/ops.py`): attributes
of old opsets become constant inputs, defaults are written out, `auto_pad`
becomes explicit pads. `STATIC_CHECKS` hold the checks that need only the
node itself, so every unsupported node is reported even behind another one.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import onnx
from onnx import numpy_helper

from kiln.frontends.onnx.context import Converter, OnnxNode, Unsupported
from kiln.ir.graph import Node, dtype_name
from kiln.ir.source_ops import split_sizes

Handler = Callable[[Converter, OnnxNode], None]
StaticCheck = Callable[[OnnxNode, int], "str | None"]
HANDLERS: dict[str, Handler] = {}
STATIC_CHECKS: dict[str, StaticCheck] = {}


def handles(*op_types: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for op_type in op_types:
            HANDLERS[op_type] = fn
        return fn

    return register


def check(*op_types: str) -> Callable[[StaticCheck], StaticCheck]:
    def register(fn: StaticCheck) -> StaticCheck:
        for op_type in op_types:
            STATIC_CHECKS[op_type] = fn
        return fn

    return register


def onnx_dtype(elem_type: int) -> str:
    """The IR dtype of an ONNX element type; Unsupported when the IR has none."""
    try:
        return dtype_name(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, ValueError, TypeError):
        raise Unsupported(f"element type {onnx.TensorProto.DataType.Name(elem_type)} is not supported") from None


# -- direct mappings ---------------------------------------------------------
def _direct(op_type: str, **defaults: Any) -> None:
    """An op whose Kiln form is the ONNX node itself, with its defaults written out (floats as the float32 ONNX stores)."""
    defaults = {k: float(np.float32(d)) if isinstance(d, float) else d for k, d in defaults.items()}

    def handler(cx: Converter, n: OnnxNode) -> None:
        attrs = {k: n.attrs.get(k, d) for k, d in defaults.items()}
        cx.emit(op_type, n.inputs, n.outputs, attrs, n.name)

    HANDLERS[op_type] = handler


for _op in ("Relu", "Sigmoid", "Tanh", "HardSwish", "Erf", "Sqrt", "Neg", "Exp", "Reciprocal", "Identity",
            "Add", "Sub", "Mul", "Div", "Pow", "MatMul", "GlobalAveragePool", "Range"):
    _direct(_op)
_direct("LeakyRelu", alpha=0.01)
_direct("HardSigmoid", alpha=0.2, beta=0.5)
_direct("Gelu", approximate="none")
_direct("Gemm", alpha=1.0, beta=1.0, transA=0, transB=0)
_direct("BatchNormalization", epsilon=1e-5)


@handles("LayerNormalization")
def _layer_norm(cx: Converter, n: OnnxNode) -> None:
    """The optional Mean and InvStdDev outputs are computed when listed (an absent one in between gets a
    name); normalization lowers the node only when nothing reads them."""
    attrs = {"axis": int(n.attrs.get("axis", -1)), "epsilon": float(np.float32(n.attrs.get("epsilon", 1e-5)))}
    outputs = [o or cx.fresh(f"{n.name}/unused{i}") for i, o in enumerate(n.outputs)]
    cx.emit("LayerNormalization", n.inputs, outputs, attrs, n.name)
_direct("Flatten", axis=1)
_direct("Gather", axis=0)
_direct("Reshape", allowzero=0)
_direct("Concat", axis=0)


@handles("Sum", "Mean", "Max", "Min")
def _variadic(cx: Converter, n: OnnxNode) -> None:
    """N inputs (broadcasting) as a chain of binary ops in input order: ((a + b) + c) ...; Mean divides that sum
    by N. The last op keeps the node's name and output; one input is the input itself."""
    binary = {"Sum": "Add", "Mean": "Add", "Max": "Max", "Min": "Min"}[n.op_type]
    out = n.outputs[0]
    if len(n.inputs) == 1:
        cx.emit("Identity", n.inputs, n.outputs, {}, n.name)
        return
    total = cx.fresh(f"{out}/sum") if n.op_type == "Mean" else out
    acc = n.inputs[0]
    for i, name in enumerate(n.inputs[1:], 1):
        last = i == len(n.inputs) - 1
        target = total if last else cx.fresh(f"{out}/partial{i}")
        node_name = n.name if last and n.op_type != "Mean" else cx.sub_name(n, f"partial{i}")
        cx.emit(binary, [acc, name], [target], {}, node_name)
        acc = target
    if n.op_type == "Mean":
        count = cx.const(f"{n.name}/count", len(n.inputs), cx.tensor(total).dtype)
        cx.emit("Div", [total, count], n.outputs, {}, n.name)


@check("Sum", "Mean", "Max", "Min")
def _variadic_check(n: OnnxNode, opset: int) -> str | None:
    return None if n.inputs and all(n.inputs) else f"{n.op_type} with no inputs or an empty input name"


@handles("LRN")
def _lrn(cx: Converter, n: OnnxNode) -> None:
    attrs = {k: float(np.float32(n.attrs.get(k, d))) for k, d in (("alpha", 1e-4), ("beta", 0.75), ("bias", 1.0))}
    cx.emit("LRN", n.inputs, n.outputs, {"size": int(n.attrs["size"]), **attrs}, n.name)


@check("LRN")
def _lrn_check(n: OnnxNode, opset: int) -> str | None:
    return None if int(n.attrs.get("size", 0)) >= 1 else "LRN needs a size attribute of at least 1"


@check("BatchNormalization")
def _bn_check(n: OnnxNode, opset: int) -> str | None:
    if n.attrs.get("training_mode", 0) or len(n.outputs) > 1:
        return "training-mode BatchNormalization (running statistics outputs) is not supported"
    return None


@check("Concat")
def _concat_check(n: OnnxNode, opset: int) -> str | None:
    return None if "axis" in n.attrs else "Concat without an axis attribute"


@check("Gelu")
def _gelu_check(n: OnnxNode, opset: int) -> str | None:
    approximate = n.attrs.get("approximate", "none")
    return None if approximate in ("none", "tanh") else f"Gelu approximate={approximate!r}"


# -- convolution and pooling -----------------------------------------------------
def explicit_pads(attrs: dict[str, Any], sizes: tuple[int, ...], kernel: list[int], strides: list[int], dilations: list[int]) -> list[int]:
    """ONNX `pads` (begins then ends) with `auto_pad` resolved as ONNX defines it."""
    rank = len(sizes)
    auto = attrs.get("auto_pad", "NOTSET")
    if auto == "NOTSET":
        return list(attrs.get("pads", [0] * 2 * rank))
    if auto == "VALID":
        return [0] * 2 * rank
    begins, ends = [], []
    for size, k, s, d in zip(sizes, kernel, strides, dilations):
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, large = total // 2, total - total // 2
        begins.append(small if auto == "SAME_UPPER" else large)
        ends.append(large if auto == "SAME_UPPER" else small)
    return begins + ends


@check("Conv", "MaxPool", "AveragePool")
def _window_check(n: OnnxNode, opset: int) -> str | None:
    if n.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
        return f"auto_pad={n.attrs['auto_pad']!r}"
    if n.op_type == "MaxPool" and len(n.outputs) > 1:
        return "MaxPool with an Indices output is not supported"
    if n.op_type != "Conv" and "kernel_shape" not in n.attrs:
        return "pooling without kernel_shape"
    return None


def _window_attrs(n: OnnxNode, x_shape: tuple[int, ...], kernel: list[int]) -> dict[str, Any]:
    spatial = len(kernel)
    if spatial not in (1, 2) or len(x_shape) != spatial + 2:
        raise Unsupported(f"{spatial}-D window on a rank-{len(x_shape)} input (Kiln supports 1-D and 2-D)")
    strides = list(n.attrs.get("strides", [1] * spatial))
    dilations = list(n.attrs.get("dilations", [1] * spatial))
    pads = explicit_pads(n.attrs, x_shape[2:], kernel, strides, dilations)
    return {"strides": strides, "pads": pads, "dilations": dilations}


@handles("Conv")
def _conv(cx: Converter, n: OnnxNode) -> None:
    x, w = cx.tensor(n.inputs[0]), cx.tensor(n.inputs[1])
    attrs = _window_attrs(n, x.shape, list(n.attrs.get("kernel_shape", w.shape[2:])))
    attrs["group"] = n.attrs.get("group", 1)
    cx.emit("Conv", n.inputs, n.outputs, attrs, n.name)


@check("ConvTranspose")
def _conv_transpose_check(n: OnnxNode, opset: int) -> str | None:
    if n.attrs.get("auto_pad", "NOTSET") != "NOTSET" or "output_shape" in n.attrs:
        return "ConvTranspose with auto_pad or output_shape (give explicit pads)"
    return None


@handles("ConvTranspose")
def _conv_transpose(cx: Converter, n: OnnxNode) -> None:
    if len(cx.tensor(n.inputs[0]).shape) != 4:
        raise Unsupported("only 2-D ConvTranspose is supported")
    attrs = {k: list(n.attrs.get(k, d)) for k, d in (("strides", [1, 1]), ("pads", [0, 0, 0, 0]), ("dilations", [1, 1]),
                                                      ("output_padding", [0, 0]))}
    cx.emit("ConvTranspose", n.inputs, n.outputs, {**attrs, "group": int(n.attrs.get("group", 1))}, n.name)


@handles("MaxPool", "AveragePool")
def _pool(cx: Converter, n: OnnxNode) -> None:
    kernel = list(n.attrs["kernel_shape"])
    attrs = {"kernel_shape": kernel, **_window_attrs(n, cx.tensor(n.inputs[0]).shape, kernel)}
    attrs["ceil_mode"] = n.attrs.get("ceil_mode", 0)
    if n.op_type == "AveragePool":
        attrs["count_include_pad"] = n.attrs.get("count_include_pad", 0)
    cx.emit(n.op_type, n.inputs[:1], n.outputs, attrs, n.name)


# -- activations with opset-dependent forms ----------------------------------------
@handles("Clip")
def _clip(cx: Converter, n: OnnxNode) -> None:
    """Clip bounds are inputs since opset 11; older attributes become constants."""
    inputs = n.inputs
    if cx.opset < 11:
        dtype = cx.tensor(n.inputs[0]).dtype
        inputs = [inputs[0]] + [cx.const(f"{n.name}/{k}", n.attrs[k], dtype) if k in n.attrs else "" for k in ("min", "max")]
    cx.emit("Clip", inputs, n.outputs, {}, n.name)


@handles("Softmax")
def _softmax(cx: Converter, n: OnnxNode) -> None:
    """Before opset 13 Softmax flattens to 2-D at `axis` (default 1): reshape around it when that differs."""
    x = cx.tensor(n.inputs[0])
    rank = len(x.shape)
    axis = n.attrs.get("axis", -1 if cx.opset >= 13 else 1) % max(rank, 1)
    if cx.opset >= 13 or axis == rank - 1:
        cx.emit("Softmax", n.inputs, n.outputs, {"axis": axis}, n.name)
        return
    flat = [int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:]))]
    pre, post = cx.fresh(f"{n.outputs[0]}/flat"), cx.fresh(f"{n.outputs[0]}/softmax")
    cx.emit("Reshape", [n.inputs[0], cx.const(f"{n.name}/flat_shape", flat, "int64")], [pre], {"allowzero": 0}, cx.sub_name(n, "flatten"))
    cx.emit("Softmax", [pre], [post], {"axis": 1}, n.name)
    cx.emit("Reshape", [post, cx.const(f"{n.name}/shape", x.shape, "int64")], n.outputs, {"allowzero": 0}, cx.sub_name(n, "unflatten"))


@handles("Dropout")
def _dropout(cx: Converter, n: OnnxNode) -> None:
    """Inference only: a training_mode input must be a constant false."""
    mode = n.inputs[2] if len(n.inputs) > 2 and n.inputs[2] else ""
    if mode and (cx.value(mode) is None or bool(np.asarray(cx.value(mode)).ravel()[0])):
        raise Unsupported("training-mode Dropout is not supported")
    cx.emit("Dropout", n.inputs[:1], n.outputs, {}, n.name)


# -- reductions and shape ops ---------------------------------------------------------
def _axes_input(cx: Converter, n: OnnxNode, since: int) -> list[str]:
    """Inputs with `axes` as the second one: an attribute before opset `since`, an input from it."""
    if cx.opset >= since or "axes" not in n.attrs:
        return n.inputs
    return [n.inputs[0], cx.const(f"{n.name}/axes", n.attrs["axes"], "int64")]


@handles("ReduceMean")
def _reduce_mean(cx: Converter, n: OnnxNode) -> None:
    attrs = {"keepdims": n.attrs.get("keepdims", 1), "noop_with_empty_axes": n.attrs.get("noop_with_empty_axes", 0)}
    cx.emit("ReduceMean", _axes_input(cx, n, 18), n.outputs, attrs, n.name)


@handles("Squeeze", "Unsqueeze")
def _squeeze(cx: Converter, n: OnnxNode) -> None:
    cx.emit(n.op_type, _axes_input(cx, n, 13), n.outputs, {}, n.name)


@handles("Transpose")
def _transpose(cx: Converter, n: OnnxNode) -> None:
    rank = len(cx.tensor(n.inputs[0]).shape)
    cx.emit("Transpose", n.inputs, n.outputs, {"perm": list(n.attrs.get("perm", range(rank - 1, -1, -1)))}, n.name)


@check("Pad")
def _pad_check(n: OnnxNode, opset: int) -> str | None:
    mode = n.attrs.get("mode", "constant")
    return None if mode == "constant" else f"Pad mode {mode!r} (Kiln pads with a constant only)"


@handles("Pad")
def _pad(cx: Converter, n: OnnxNode) -> None:
    """Pads and the value are inputs since opset 11."""
    inputs = n.inputs
    if cx.opset < 11:
        dtype = cx.tensor(n.inputs[0]).dtype
        pads = cx.const(f"{n.name}/pads", n.attrs["pads"], "int64")
        inputs = [inputs[0], pads, cx.const(f"{n.name}/value", n.attrs.get("value", 0.0), dtype)]
    cx.emit("Pad", inputs, n.outputs, {"mode": "constant"}, n.name)


@handles("Slice")
def _slice(cx: Converter, n: OnnxNode) -> None:
    """Starts, ends and axes are inputs since opset 10."""
    inputs = n.inputs
    if cx.opset < 10:
        inputs = [inputs[0]] + [cx.const(f"{n.name}/{k}", n.attrs[k], "int64") if k in n.attrs else "" for k in ("starts", "ends", "axes")]
    cx.emit("Slice", inputs, n.outputs, {}, n.name)


@handles("Split")
def _split(cx: Converter, n: OnnxNode) -> None:
    """Kiln's Split always has explicit sizes: from the attribute, the input, num_outputs or equal parts."""
    x = cx.tensor(n.inputs[0])
    axis = n.attrs.get("axis", 0)
    given = cx.tensor(n.inputs[1]) if len(n.inputs) > 1 and n.inputs[1] else None
    if cx.opset < 13 and "split" in n.attrs:
        given = cx.tensor(cx.const(f"{n.name}/split", n.attrs["split"], "int64"))
    probe = Node(n.name, "Split", [], n.outputs, {k: v for k, v in n.attrs.items() if k in ("axis", "num_outputs")})
    sizes = split_sizes(probe, [x, given])
    if len(sizes) != len(n.outputs):
        raise Unsupported(f"{len(sizes)} split sizes for {len(n.outputs)} outputs")
    cx.emit("Split", [n.inputs[0], cx.const(f"{n.name}/split", sizes, "int64")], n.outputs, {"axis": axis}, n.name)


# -- resizing ------------------------------------------------------------------------
@check("Resize", "Upsample")
def _resize_check(n: OnnxNode, opset: int) -> str | None:
    mode = n.attrs.get("mode", "nearest")
    if mode != "nearest":
        return f"{n.op_type} mode {mode!r} (Kiln resizes with nearest only)"
    if n.attrs.get("antialias", 0):
        return "Resize antialias is not supported"
    if n.attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize":
        return "Resize coordinate_transformation_mode 'tf_crop_and_resize' is not supported"
    return None


def _legacy_nearest(scales: list[float]) -> str:
    """Resize-10 and Upsample have no nearest_mode: onnxruntime floors when enlarging and rounds up when shrinking."""
    if all(s >= 1 for s in scales):
        return "floor"
    if all(s <= 1 for s in scales):
        return "ceil"
    raise Unsupported(f"legacy nearest resize that enlarges and shrinks at once (scales {scales})")


def _legacy_resize(cx: Converter, n: OnnxNode, scales_name: str) -> None:
    scales = cx.value(scales_name)
    if scales is None:
        raise Unsupported("scales computed at run time")
    attrs = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": _legacy_nearest([float(s) for s in scales])}
    cx.emit("Resize", [n.inputs[0], "", scales_name], n.outputs, attrs, n.name)


@handles("Upsample")
def _upsample(cx: Converter, n: OnnxNode) -> None:
    if len(n.inputs) > 1:
        _legacy_resize(cx, n, n.inputs[1])
    else:
        _legacy_resize(cx, n, cx.const(f"{n.name}/scales", n.attrs["scales"], "float32"))


@handles("Resize")
def _resize(cx: Converter, n: OnnxNode) -> None:
    if cx.opset < 11:
        _legacy_resize(cx, n, n.inputs[1])
        return
    ins = (n.inputs + ["", "", ""])[:4]
    scales, sizes = ("" if not name or (cx.value(name) is not None and cx.value(name).size == 0) else name for name in ins[2:])
    attrs: dict[str, Any] = {
        "mode": "nearest",
        "coordinate_transformation_mode": n.attrs.get("coordinate_transformation_mode", "half_pixel"),
        "nearest_mode": n.attrs.get("nearest_mode", "round_prefer_floor"),
    }
    for key in ("keep_aspect_ratio_policy", "axes"):
        if key in n.attrs:
            attrs[key] = n.attrs[key]
    cx.emit("Resize", [ins[0], "", scales, sizes], n.outputs, attrs, n.name)


# -- constants and shape arithmetic ----------------------------------------------------------
@handles("Constant")
def _constant(cx: Converter, n: OnnxNode) -> None:
    a = n.attrs
    if "value" in a:
        data = numpy_helper.to_array(a["value"])
    elif "value_float" in a or "value_floats" in a:
        data = np.asarray(a.get("value_float", a.get("value_floats")), np.float32)
    elif "value_int" in a or "value_ints" in a:
        data = np.asarray(a.get("value_int", a.get("value_ints")), np.int64)
    else:
        raise Unsupported(f"Constant of kind {', '.join(sorted(a))} is not supported")
    cx.values[n.outputs[0]] = data


@handles("Shape", "Size")
def _shape(cx: Converter, n: OnnxNode) -> None:
    """Shapes are static in Kiln, so Shape and Size are constants whatever their input."""
    shape = cx.tensor(n.inputs[0]).shape
    if n.op_type == "Size":
        cx.values[n.outputs[0]] = np.asarray(int(np.prod(shape)), np.int64)
        return
    start, end = n.attrs.get("start", 0), n.attrs.get("end", len(shape))
    cx.values[n.outputs[0]] = np.asarray(shape[start:end], np.int64)


@handles("Cast")
def _cast(cx: Converter, n: OnnxNode) -> None:
    cx.emit("Cast", n.inputs, n.outputs, {"to": onnx_dtype(n.attrs["to"])}, n.name)


@handles("ConstantOfShape")
def _constant_of_shape(cx: Converter, n: OnnxNode) -> None:
    proto = n.attrs.get("value")
    value = np.zeros(1, np.float32) if proto is None else numpy_helper.to_array(proto)
    if value.size != 1:
        raise Unsupported("ConstantOfShape value must have one element")
    dtype = "float32" if proto is None else onnx_dtype(proto.data_type)
    attrs = {"value": value.ravel()[0].item(), "dtype": dtype}
    cx.emit("ConstantOfShape", n.inputs, n.outputs, attrs, n.name)
