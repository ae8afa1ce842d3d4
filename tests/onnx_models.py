"""ONNX test models built with `onnx.helper`: one small graph per operator case, a small CNN, a shape subgraph."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FLOAT = TensorProto.FLOAT


def make_model(nodes: list[onnx.NodeProto], inputs: dict[str, tuple[list[Any], int]], consts: dict[str, np.ndarray],
               outputs: list[str], opset: int) -> onnx.ModelProto:
    """A model whose output types come from ONNX shape inference (the checker wants them)."""
    graph = helper.make_graph(
        nodes, "case",
        [helper.make_tensor_value_info(k, elem, shape) for k, (shape, elem) in inputs.items()],
        [onnx.ValueInfoProto(name=o) for o in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 10)
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


@dataclass
class Case:
    """One operator case: float32 graph inputs of the given shapes, constant inputs as initializers."""

    id: str
    op: str
    inputs: dict[str, tuple[int, ...]]
    attrs: dict[str, Any] = field(default_factory=dict)
    consts: dict[str, np.ndarray] = field(default_factory=dict)
    opset: int = 17
    order: list[str] | None = None  # node input order, "" for an absent optional input
    outputs: int = 1
    positive: bool = False  # feed |x| (Sqrt)

    def model(self) -> onnx.ModelProto:
        names = self.order if self.order is not None else [*self.inputs, *self.consts]
        outs = [f"y{i}" for i in range(self.outputs)]
        node = helper.make_node(self.op, names, outs, name=f"{self.op.lower()}_node", **self.attrs)
        return make_model([node], {k: (list(s), FLOAT) for k, s in self.inputs.items()}, self.consts, outs, self.opset)

    def feeds(self, seed: int = 0) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        feeds = {k: rng.standard_normal(s).astype(np.float32) for k, s in self.inputs.items()}
        return {k: np.abs(v) for k, v in feeds.items()} if self.positive else feeds


def _w(*shape: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _i64(*v: int) -> np.ndarray:
    return np.asarray(v, np.int64)


def _f32(*v: float) -> np.ndarray:
    return np.asarray(v, np.float32)


X4 = {"x": (2, 4, 7, 9)}
CONV = [
    Case("conv2d", "Conv", X4, {"pads": [1, 1, 1, 1]}, {"w": _w(6, 4, 3, 3), "b": _w(6)}),
    Case("conv2d_nobias_stride_dilation", "Conv", X4, {"strides": [2, 1], "dilations": [2, 3]}, {"w": _w(5, 4, 3, 2)}),
    Case("conv2d_asymmetric_pads", "Conv", X4, {"pads": [0, 2, 1, 0], "strides": [2, 2]}, {"w": _w(3, 4, 3, 3), "b": _w(3)}),
    Case("conv2d_groups", "Conv", X4, {"group": 2, "pads": [1, 1, 1, 1]}, {"w": _w(6, 2, 3, 3), "b": _w(6)}),
    Case("conv2d_depthwise_multiplier", "Conv", X4, {"group": 4, "pads": [1, 1, 1, 1]}, {"w": _w(8, 1, 3, 3), "b": _w(8)}),
    Case("conv2d_same_upper", "Conv", X4, {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, {"w": _w(3, 4, 4, 4)}),
    Case("conv2d_same_lower", "Conv", X4, {"auto_pad": "SAME_LOWER", "strides": [2, 2]}, {"w": _w(3, 4, 4, 4)}),
    Case("conv2d_valid", "Conv", X4, {"auto_pad": "VALID", "kernel_shape": [3, 3]}, {"w": _w(3, 4, 3, 3)}),
    Case("conv1d", "Conv", {"x": (2, 3, 11)}, {"pads": [2, 1], "strides": [2], "dilations": [2]}, {"w": _w(4, 3, 3), "b": _w(4)}),
    Case("conv1d_depthwise_same", "Conv", {"x": (1, 3, 10)}, {"group": 3, "auto_pad": "SAME_UPPER"}, {"w": _w(3, 1, 4)}),
    Case("conv_transpose_up2", "ConvTranspose", X4, {"strides": [2, 2]}, {"w": _w(4, 3, 2, 2), "b": _w(3)}),
    Case("conv_transpose_general", "ConvTranspose", X4, {"strides": [2, 3], "pads": [1, 0, 2, 1], "dilations": [2, 1],
                                                           "output_padding": [1, 2], "group": 2}, {"w": _w(4, 3, 3, 4), "b": _w(6)}),
]
MATMUL = [
    Case("gemm_transb", "Gemm", {"a": (3, 5)}, {"transB": 1}, {"b": _w(4, 5), "c": _w(4)}),
    Case("gemm_transa_alpha_beta", "Gemm", {"a": (5, 3)}, {"transA": 1, "alpha": 0.5, "beta": 2.0}, {"b": _w(5, 4), "c": _w(3, 4)}),
    Case("gemm_no_c", "Gemm", {"a": (3, 5), "b": (5, 2)}),
    Case("matmul_const", "MatMul", {"a": (2, 3, 5)}, {}, {"b": _w(5, 4)}),
    Case("matmul_dynamic", "MatMul", {"a": (2, 3, 5), "b": (2, 5, 4)}),
    Case("matmul_vector", "MatMul", {"a": (3, 5)}, {}, {"b": _w(5)}),
    Case("batchnorm", "BatchNormalization", X4, {"epsilon": 1e-3},
         {"s": _w(4), "bias": _w(4, seed=2), "mean": _w(4, seed=3), "var": np.abs(_w(4, seed=4)) + 0.5}),
]
ACTIVATIONS = [
    Case("relu", "Relu", X4),
    Case("clip_both", "Clip", X4, {}, {"lo": np.float32(-0.5), "hi": np.float32(0.7)}),
    Case("clip_max_only", "Clip", X4, {}, {"hi": np.float32(6.0)}, order=["x", "", "hi"]),
    Case("clip_min_only_shape1", "Clip", X4, {}, {"lo": _f32(0.0)}),
    Case("clip_opset10_attrs", "Clip", X4, {"min": -0.3, "max": 0.4}, opset=10),
    Case("leaky_relu", "LeakyRelu", X4, {"alpha": 0.2}),
    Case("sigmoid", "Sigmoid", X4),
    Case("tanh", "Tanh", X4),
    Case("hard_sigmoid", "HardSigmoid", X4, {"alpha": 0.3, "beta": 0.4}),
    Case("hard_swish", "HardSwish", X4),
    Case("gelu_none", "Gelu", X4, opset=20),
    Case("gelu_tanh", "Gelu", X4, {"approximate": "tanh"}, opset=20),
    Case("erf", "Erf", X4),
    Case("pow_const", "Pow", X4, {}, {"p": np.float32(3.0)}),
    Case("sqrt", "Sqrt", {"x": (3, 4)}, positive=True),
    Case("exp", "Exp", X4),
    Case("neg", "Neg", X4),
    Case("reciprocal", "Reciprocal", X4),
    Case("softmax_axis1", "Softmax", X4, {"axis": 1}, opset=13),
    Case("softmax_default", "Softmax", X4),
    Case("softmax_opset11_coerced", "Softmax", {"x": (2, 3, 4)}, {"axis": 1}, opset=11),
    Case("softmax_opset11_default", "Softmax", {"x": (2, 3, 4)}, opset=11),
    Case("layer_norm_last_axis", "LayerNormalization", {"x": (2, 3, 8)}, {"epsilon": 1e-3}, {"s": _w(8), "b": _w(8, seed=2)}),
    Case("layer_norm_two_axes_no_bias", "LayerNormalization", X4, {"axis": 2}, {"s": _w(7, 1, seed=3)}),
]
POOLS = [
    Case("maxpool", "MaxPool", X4, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    Case("maxpool_ceil_dilated", "MaxPool", X4, {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1, "dilations": [1, 2]}),
    Case("maxpool_same_upper", "MaxPool", X4, {"kernel_shape": [3, 2], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    Case("maxpool1d", "MaxPool", {"x": (1, 3, 10)}, {"kernel_shape": [3], "strides": [2], "pads": [1, 0]}),
    Case("avgpool_exclude_pad", "AveragePool", X4, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    Case("avgpool_include_pad", "AveragePool", X4, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    Case("avgpool_ceil", "AveragePool", X4, {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
    Case("avgpool_ceil_include_pad", "AveragePool", X4, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1, "count_include_pad": 1}),
    Case("avgpool_same_lower", "AveragePool", X4, {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    Case("avgpool1d", "AveragePool", {"x": (1, 3, 10)}, {"kernel_shape": [4], "strides": [3]}),
    Case("global_avgpool", "GlobalAveragePool", X4),
    Case("reduce_mean_attr", "ReduceMean", X4, {"axes": [2, 3]}, opset=13),
    Case("reduce_mean_input", "ReduceMean", X4, {"keepdims": 0}, {"axes": _i64(-1, 1)}, opset=18),
    Case("reduce_mean_all", "ReduceMean", X4, opset=18),
]
BINARY = [
    Case(f"{op.lower()}_{kind}", op, X4 if kind != "two_inputs" else {"x": (2, 4, 7, 9), "z": (4, 1, 9)}, {},
         {} if kind == "two_inputs" else {"c": np.float32(1.5) if kind == "scalar" else _w(4, 1, 1) + 3.0})
    for op in ("Add", "Sub", "Mul", "Div") for kind in ("scalar", "channel", "two_inputs")
]
SHAPES = [
    Case("concat_const", "Concat", X4, {"axis": 1}, {"c": _w(2, 3, 7, 9)}),
    Case("concat_negative_axis", "Concat", {"a": (2, 3, 4), "b": (2, 3, 1)}, {"axis": -1}),
    Case("reshape_zero_minus_one", "Reshape", X4, {}, {"s": _i64(0, -1, 9)}),
    Case("flatten_axis2", "Flatten", X4, {"axis": 2}),
    Case("flatten_default", "Flatten", X4),
    Case("squeeze_input", "Squeeze", {"x": (2, 1, 3, 1)}, {}, {"a": _i64(1)}, opset=13),
    Case("squeeze_attr", "Squeeze", {"x": (2, 1, 3, 1)}, {"axes": [-1]}, opset=11),
    Case("squeeze_all", "Squeeze", {"x": (2, 1, 3, 1)}, opset=13),
    Case("unsqueeze_input", "Unsqueeze", {"x": (2, 3)}, {}, {"a": _i64(0, -1)}, opset=13),
    Case("unsqueeze_attr", "Unsqueeze", {"x": (2, 3)}, {"axes": [1]}, opset=11),
    Case("transpose", "Transpose", X4, {"perm": [0, 2, 3, 1]}),
    Case("transpose_default", "Transpose", {"x": (2, 3, 4)}),
    Case("pad_constant_value", "Pad", X4, {}, {"p": _i64(0, 0, 1, 2, 0, 0, 3, 0), "v": np.float32(-2.5)}),
    Case("pad_negative", "Pad", X4, {}, {"p": _i64(0, 0, -1, 2, 0, 0, 1, -3)}),
    Case("pad_axes", "Pad", X4, {}, {"p": _i64(1, 2, 0, 1), "v": np.float32(0.5), "a": _i64(2, -1)}, opset=18),
    Case("pad_opset10_attrs", "Pad", X4, {"pads": [0, 0, 1, 1, 0, 0, 0, 2], "value": 1.25}, opset=10),
    Case("slice_steps", "Slice", X4, {}, {"s": _i64(1, -1), "e": _i64(6, -10), "a": _i64(2, 3), "st": _i64(2, -2)}),
    Case("slice_clamped", "Slice", X4, {}, {"s": _i64(-100, 2), "e": _i64(2**62, 3), "a": _i64(-1, 1)}),
    Case("slice_opset9_attrs", "Slice", X4, {"starts": [1], "ends": [5], "axes": [3]}, opset=9),
    Case("split_input", "Split", X4, {"axis": 3}, {"s": _i64(2, 3, 4)}, opset=13, outputs=3),
    Case("split_equal", "Split", X4, {"axis": 1}, opset=13, outputs=2),
    Case("split_attr", "Split", X4, {"axis": 1, "split": [1, 3]}, opset=11, outputs=2),
    Case("split_num_outputs", "Split", X4, {"axis": 3, "num_outputs": 4}, opset=18, outputs=4),
    Case("gather_runtime", "Gather", X4, {"axis": 1}, {"i": _i64(3, 0, -1)}),
    Case("gather_scalar_index", "Gather", X4, {"axis": 2}, {"i": np.int64(4)}),
    Case("identity", "Identity", X4),
    Case("dropout", "Dropout", X4, {}, {"r": np.float32(0.3)}),
    Case("dropout_mask", "Dropout", X4, opset=13, outputs=2),
]
RESIZE = [
    Case("resize_scales_half_pixel", "Resize", {"x": (1, 2, 3, 4)}, {"mode": "nearest"}, {"s": _f32(1, 1, 2, 3)}, opset=13, order=["x", "", "s"]),
    Case("resize_sizes_asymmetric_floor", "Resize", {"x": (1, 2, 3, 4)}, {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
         {"z": _i64(1, 2, 7, 5)}, opset=13, order=["x", "", "", "z"]),
    Case("resize_align_corners_ceil_down", "Resize", {"x": (1, 2, 6, 8)}, {"coordinate_transformation_mode": "align_corners", "nearest_mode": "round_prefer_ceil"},
         {"z": _i64(1, 2, 4, 3)}, opset=13, order=["x", "", "", "z"]),
    Case("resize_pytorch_half_pixel", "Resize", {"x": (1, 2, 5, 4)}, {"coordinate_transformation_mode": "pytorch_half_pixel", "nearest_mode": "ceil"},
         {"s": _f32(1, 1, 0.6, 2.5)}, opset=13, order=["x", "", "s"]),
    Case("resize_axes_not_larger", "Resize", {"x": (1, 2, 3, 4)}, {"axes": [2, 3], "keep_aspect_ratio_policy": "not_larger"},
         {"z": _i64(7, 9)}, opset=18, order=["x", "", "", "z"]),
    Case("resize_half_pixel_symmetric", "Resize", {"x": (1, 2, 3, 4)}, {"coordinate_transformation_mode": "half_pixel_symmetric"},
         {"s": _f32(1, 1, 1.7, 2.2)}, opset=19, order=["x", "", "s"]),
    Case("resize_opset11_empty_scales", "Resize", {"x": (1, 2, 3, 4)}, {"coordinate_transformation_mode": "asymmetric"},
         {"r": _f32(), "s": _f32(), "z": _i64(1, 2, 6, 8)}, opset=11, order=["x", "r", "s", "z"]),
    Case("resize_opset10", "Resize", {"x": (1, 2, 3, 4)}, {"mode": "nearest"}, {"s": _f32(1, 1, 2, 1.5)}, opset=10),
    Case("resize_opset10_down", "Resize", {"x": (1, 2, 7, 9)}, {"mode": "nearest"}, {"s": _f32(1, 1, 0.3, 0.75)}, opset=10),
    Case("upsample_opset9", "Upsample", {"x": (1, 2, 3, 4)}, {"mode": "nearest"}, {"s": _f32(1, 1, 1.7, 2.5)}, opset=9),
    Case("upsample_opset7", "Upsample", {"x": (1, 2, 3, 4)}, {"mode": "nearest", "scales": [1.0, 1.0, 2.0, 1.5]}, opset=7),
]
OP_CASES = CONV + MATMUL + ACTIVATIONS + POOLS + BINARY + SHAPES + RESIZE


def small_cnn(opset: int) -> onnx.ModelProto:
    """Conv-BN-Relu, depthwise conv, pool, flatten, Gemm, softmax: the usual small classifier."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("BatchNormalization", ["c1", "bn_s", "bn_b", "bn_m", "bn_v"], ["n1"], name="bn1"),
        helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="dw2", group=8, auto_pad="SAME_UPPER", kernel_shape=[3, 3]),
        helper.make_node("Clip", ["c2", "zero", "six"], ["r2"], name="relu6"),
        helper.make_node("MaxPool", ["r2"], ["p2"], name="pool2", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p2"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=1),
    ]
    consts = {
        "w1": _w(8, 3, 3, 3), "b1": _w(8, seed=2), "bn_s": _w(8, seed=3), "bn_b": _w(8, seed=4), "bn_m": _w(8, seed=5),
        "bn_v": np.abs(_w(8, seed=6)) + 0.5, "w2": _w(8, 1, 3, 3, seed=7), "zero": np.float32(0), "six": np.float32(6),
        "w3": _w(5, 8, seed=8), "b3": _w(5, seed=9),
    }
    return make_model(nodes, {"x": (["batch", 3, 16, 16], FLOAT)}, consts, ["probs"], opset)


def shape_subgraph_model(opset: int = 17) -> onnx.ModelProto:
    """The exporters' dynamic flatten: Shape→Gather→Unsqueeze→Concat→Reshape feeding a MatMul."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Shape", ["r"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes0"], ["batch1"]),
        helper.make_node("Concat", ["batch1", "minus_one"], ["new_shape"], axis=0),
        helper.make_node("Reshape", ["r", "new_shape"], ["flat"]),
        helper.make_node("Cast", ["batch"], ["batch_f"], to=FLOAT),
        helper.make_node("Range", ["start", "batch_f", "one"], ["steps"]),
        helper.make_node("ConstantOfShape", ["batch1"], ["ones"], value=numpy_helper.from_array(_f32(1.0))),
        helper.make_node("Add", ["steps", "ones"], ["bias"]),
        helper.make_node("Unsqueeze", ["bias", "axes1"], ["bias_col"]),
        helper.make_node("MatMul", ["flat", "w"], ["mm"]),
        helper.make_node("Add", ["mm", "bias_col"], ["y"]),
    ]
    consts = {"zero": np.int64(0), "axes0": _i64(0), "axes1": _i64(1), "minus_one": _i64(-1), "start": np.float32(0), "one": np.float32(1),
              "w": _w(24, 5)}
    return make_model(nodes, {"x": (["n", 2, 3, 4], FLOAT)}, consts, ["y"], opset)


def gelu_erf_model(opset: int = 13) -> onnx.ModelProto:
    """GELU as exporters wrote it before opset 20: x * 0.5 * (1 + erf(x / sqrt(2)))."""
    nodes = [
        helper.make_node("Div", ["x", "sqrt2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["a"]),
        helper.make_node("Mul", ["x", "a"], ["m"]),
        helper.make_node("Mul", ["m", "half"], ["y"]),
    ]
    consts = {"sqrt2": np.float32(np.sqrt(2.0)), "one": np.float32(1), "half": np.float32(0.5)}
    return make_model(nodes, {"x": ([2, 8, 5], FLOAT)}, consts, ["y"], opset)


def gelu_tanh_model(opset: int = 13) -> onnx.ModelProto:
    """The tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    nodes = [
        helper.make_node("Pow", ["x", "three"], ["x3"]),
        helper.make_node("Mul", ["x3", "c"], ["cx3"]),
        helper.make_node("Add", ["x", "cx3"], ["inner"]),
        helper.make_node("Mul", ["inner", "k"], ["scaled"]),
        helper.make_node("Tanh", ["scaled"], ["t"]),
        helper.make_node("Add", ["t", "one"], ["t1"]),
        helper.make_node("Mul", ["x", "t1"], ["m"]),
        helper.make_node("Mul", ["m", "half"], ["y"]),
    ]
    consts = {"three": np.float32(3), "c": np.float32(0.044715), "k": np.float32(np.sqrt(2 / np.pi)), "one": np.float32(1), "half": np.float32(0.5)}
    return make_model(nodes, {"x": ([2, 8, 5], FLOAT)}, consts, ["y"], opset)


def silu_model(opset: int = 17) -> onnx.ModelProto:
    """SiLU as exported: Sigmoid then Mul with its own input."""
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])]
    return make_model(nodes, {"x": ([2, 4, 3, 3], FLOAT)}, {}, ["y"], opset)


def qdq_source_model(opset: int = 17) -> onnx.ModelProto:
    """A float model for onnxruntime's quantize_static: convs (one depthwise), residual Add, pool, Gemm, a Softmax head."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="dw2", group=8, pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], name="pw3"),
        helper.make_node("Conv", ["r2", "w4"], ["skip"], name="skip4"),
        helper.make_node("Add", ["c3", "skip"], ["sum"], name="add"),
        helper.make_node("MaxPool", ["sum"], ["pool"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["pool"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "w5", "b5"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=1),
    ]
    consts = {
        "w1": _w(8, 3, 3, 3) * 0.5, "b1": _w(8, seed=2) * 0.1, "w2": _w(8, 1, 3, 3, seed=3) * 0.5, "b2": _w(8, seed=4) * 0.1,
        "w3": _w(8, 8, 1, 1, seed=5) * 0.3, "b3": _w(8, seed=6) * 0.1, "w4": _w(8, 8, 1, 1, seed=7) * 0.3,
        "w5": _w(10, 128, seed=8) * 0.1, "b5": _w(10, seed=9) * 0.1,
    }
    return make_model(nodes, {"x": ([1, 3, 16, 16], FLOAT)}, consts, ["logits", "probs"], opset)


def export_torch_model(path: str, dynamo: bool, opset: int) -> None:
    """A CNN through torch.onnx.export: shape subgraphs, split/cat, pad, decomposed GELU/SiLU, upsample, a view-flatten."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1, self.bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
            self.dw, self.c2 = nn.Conv2d(8, 8, 3, padding=1, groups=8, stride=2), nn.Conv2d(8, 16, 1)
            self.fc, self.up = nn.Linear(400, 10), nn.Upsample(scale_factor=2, mode="nearest")

        def forward(self, x):
            x = F.silu(self.bn(self.c1(x)))
            a, b = torch.split(F.hardswish(self.dw(x)), [3, 5], dim=1)
            x = F.max_pool2d(F.pad(torch.cat([F.gelu(a), F.leaky_relu(b, 0.1)], 1), (1, 0, 0, 1)), 2, ceil_mode=True)
            x = F.avg_pool2d(self.c2(self.up(x)), 2)
            x = (x - x.mean(dim=(2, 3), keepdim=True) * 0.5).view(x.size(0), -1)
            return F.softmax(self.fc(x), dim=-1), torch.sigmoid(x[:, 1:20:3]).unsqueeze(1)

    torch.manual_seed(0)
    net = Net().eval()
    with torch.no_grad():
        net.bn.running_mean.uniform_(-1, 1)
        net.bn.running_var.uniform_(0.5, 2)
    kwargs = {} if dynamo else {"dynamic_axes": {"x": {0: "batch"}}}
    torch.onnx.export(net, (torch.zeros(2, 3, 16, 16),), path, opset_version=opset, dynamo=dynamo, input_names=["x"], output_names=["probs", "sig"], **kwargs)


def quantize_qdq(target: Path, activation: str, op_types: list[str] | None = None) -> Path:
    """`qdq_source_model()` quantized by onnxruntime's quantize_static into a QDQ file at `target`:
    per-channel int8 weights, `activation` ("QInt8" or "QUInt8") activations, 8 seeded calibration samples."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(11)
            self.samples = iter([{"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(8)])

        def get_next(self):
            return next(self.samples, None)

    source = target.with_name(f"{target.stem}_float.onnx")
    onnx.save(qdq_source_model(), source)
    logging.disable(logging.WARNING)
    try:
        quantize_static(str(source), str(target), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=getattr(QuantType, activation), weight_type=QuantType.QInt8,
                        **({"op_types_to_quantize": op_types} if op_types else {}))
    finally:
        logging.disable(logging.NOTSET)
    return target
