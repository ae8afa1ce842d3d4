"""The quantization pattern suite: small float ONNX models with the patterns real networks contain.

Each pattern is a seeded float model built with `onnx.helper` and the input
distribution it is calibrated and tested on. The models take their batch on
axis 0 and never fix it inside (reshapes copy it with 0), so onnx's
ReferenceEvaluator runs a whole test set at once, while the declared input
shape (batch 1) is what Kiln compiles and onnxruntime calibrates with.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 19
Sampler = Callable[[np.random.Generator, int], dict[str, np.ndarray]]


class Net:
    """A float ONNX graph in a few lines: seeded weights, one call per node."""

    def __init__(self, name: str, inputs: dict[str, tuple[int, ...]], seed: int = 0) -> None:
        self.name, self.inputs = name, inputs
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.consts: dict[str, np.ndarray] = {}

    def _name(self, base: str) -> str:
        return f"{base}{len(self.nodes)}"

    def const(self, value: np.ndarray, base: str = "c") -> str:
        name = f"{base}{len(self.consts)}"
        self.consts[name] = np.asarray(value, np.float32) if np.asarray(value).dtype.kind == "f" else np.asarray(value)
        return name

    def weight(self, *shape: int, gain: float = 1.0, fan_in: int | None = None) -> str:
        fan = fan_in or int(np.prod(shape[1:])) or 1
        return self.const(self.rng.standard_normal(shape) * gain * np.sqrt(2.0 / fan), "w")

    def op(self, op_type: str, *inputs: str, outputs: int = 1, **attrs) -> str | list[str]:
        base = self._name(op_type.lower())
        outs = [base] if outputs == 1 else [f"{base}_{i}" for i in range(outputs)]
        if op_type == "Split":
            attrs.setdefault("num_outputs", outputs)
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=base, **attrs))
        return outs[0] if outputs == 1 else outs

    def conv(self, x: str, cin: int, cout: int, k: int = 3, stride: int = 1, groups: int = 1, gain: float = 1.0,
             bias: bool = True, pad: int | None = None) -> str:
        w = self.weight(cout, cin // groups, k, k, gain=gain)
        b = [self.const(self.rng.standard_normal(cout) * 0.1, "b")] if bias else []
        p = k // 2 if pad is None else pad
        return self.op("Conv", x, w, *b, pads=[p] * 4, strides=[stride, stride], group=groups)

    def dense(self, x: str, fin: int, fout: int, gain: float = 1.0) -> str:
        """x @ W + b as onnxruntime and torch export it for [N, ..., F] inputs."""
        w = self.const(self.rng.standard_normal((fin, fout)) * gain * np.sqrt(2.0 / fin), "w")
        return self.op("Add", self.op("MatMul", x, w), self.const(self.rng.standard_normal(fout) * 0.1, "b"))

    def relu(self, x: str) -> str:
        return self.op("Relu", x)

    def silu(self, x: str) -> str:
        return self.op("Mul", x, self.op("Sigmoid", x))

    def model(self, *outputs: str) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, self.name,
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in self.inputs.items()],
            [onnx.ValueInfoProto(name=o) for o in outputs],
            [numpy_helper.from_array(v, k) for k, v in self.consts.items()])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = 9
        return onnx.shape_inference.infer_shapes(model, strict_mode=True)


@dataclass(frozen=True)
class Pattern:
    name: str
    what: str
    build: Callable[[], onnx.ModelProto]
    sample: Sampler


def normal(**shapes: tuple[int, ...]) -> Sampler:
    return lambda rng, n: {k: rng.standard_normal((n, *s[1:])).astype(np.float32) for k, s in shapes.items()}


def uniform(**shapes: tuple[int, ...]) -> Sampler:
    return lambda rng, n: {k: rng.uniform(0.0, 1.0, (n, *s[1:])).astype(np.float32) for k, s in shapes.items()}


IMG = (1, 4, 8, 8)
VEC = (1, 16)


def concat_sigmoid_input() -> onnx.ModelProto:
    n = Net("concat_sigmoid_input", {"x": VEC})
    h = n.op("Sigmoid", n.dense(n.silu(n.dense("x", 16, 32)), 32, 16))
    return n.model(n.op("Softmax", n.dense(n.op("Concat", h, "x", axis=1), 32, 10), axis=-1))


def concat_branch_ranges() -> onnx.ModelProto:
    n = Net("concat_branch_ranges", {"x": IMG})
    a, b = n.conv("x", 4, 4, gain=0.05), n.relu(n.conv("x", 4, 4, gain=4.0))
    return n.model(n.conv(n.op("Concat", a, b, axis=1), 8, 4))


def concat_tanh_relu() -> onnx.ModelProto:
    n = Net("concat_tanh_relu", {"x": IMG})
    a, b = n.op("Tanh", n.conv("x", 4, 4)), n.relu(n.conv("x", 4, 4, gain=3.0))
    return n.model(n.conv(n.op("Concat", a, b, axis=1), 8, 4))


def concat_three_inputs() -> onnx.ModelProto:
    n = Net("concat_three_inputs", {"x": VEC})
    a = n.op("Sigmoid", n.dense("x", 16, 8))
    b = n.op("Tanh", n.dense("x", 16, 8))
    return n.model(n.dense(n.op("Concat", a, "x", b, axis=1), 32, 8))


def residual_mismatch() -> onnx.ModelProto:
    n = Net("residual_mismatch", {"x": IMG})
    big = n.relu(n.conv("x", 4, 4, gain=6.0))
    small = n.conv(big, 4, 4, gain=0.02)
    return n.model(n.conv(n.op("Add", small, n.conv("x", 4, 4, gain=0.1)), 4, 4))


def residual_block() -> onnx.ModelProto:
    n = Net("residual_block", {"x": IMG})
    h = n.relu(n.conv("x", 4, 8))
    y = n.relu(n.op("Add", n.conv(n.relu(n.conv(h, 8, 8)), 8, 8), h))
    return n.model(n.op("MaxPool", y, kernel_shape=[2, 2], strides=[2, 2]))


def sigmoid_head() -> onnx.ModelProto:
    n = Net("sigmoid_head", {"x": IMG})
    g = n.op("Flatten", n.op("GlobalAveragePool", n.relu(n.conv("x", 4, 8))), axis=1)
    return n.model(n.op("Sigmoid", n.dense(g, 8, 4, gain=3.0)))


def softmax_head() -> onnx.ModelProto:
    n = Net("softmax_head", {"x": VEC})
    return n.model(n.op("Softmax", n.dense(n.relu(n.dense("x", 16, 32)), 32, 10, gain=2.0), axis=-1))


def tanh_head() -> onnx.ModelProto:
    n = Net("tanh_head", {"x": VEC})
    return n.model(n.op("Tanh", n.dense(n.relu(n.dense("x", 16, 16)), 16, 8)))


def tanh_small() -> onnx.ModelProto:
    n = Net("tanh_small", {"x": VEC})
    return n.model(n.op("Tanh", n.dense(n.relu(n.dense("x", 16, 32)), 32, 8, gain=0.1)))


def softmax_wide() -> onnx.ModelProto:
    n = Net("softmax_wide", {"x": VEC})
    return n.model(n.op("Softmax", n.dense(n.relu(n.dense("x", 16, 32)), 32, 64, gain=0.5), axis=-1))


def hardswish() -> onnx.ModelProto:
    n = Net("hardswish", {"x": IMG})
    return n.model(n.conv(n.op("HardSwish", n.conv("x", 4, 8, gain=2.0)), 8, 4))


def silu() -> onnx.ModelProto:
    n = Net("silu", {"x": IMG})
    return n.model(n.conv(n.silu(n.conv("x", 4, 8, gain=2.0)), 8, 4))


def gelu() -> onnx.ModelProto:
    n = Net("gelu", {"x": VEC})
    h = n.dense("x", 16, 32)
    erf = n.op("Erf", n.op("Div", h, n.const(np.float32(np.sqrt(2.0)))))
    g = n.op("Mul", n.op("Mul", h, n.op("Add", erf, n.const(np.float32(1.0)))), n.const(np.float32(0.5)))
    return n.model(n.dense(g, 32, 8))


def squeeze_excite() -> onnx.ModelProto:
    n = Net("squeeze_excite", {"x": IMG})
    h = n.relu(n.conv("x", 4, 8))
    s = n.op("Sigmoid", n.conv(n.relu(n.conv(n.op("GlobalAveragePool", h), 8, 4, k=1)), 4, 8, k=1))
    return n.model(n.conv(n.op("Mul", h, s), 8, 4))


def channel_shuffle() -> onnx.ModelProto:
    n = Net("channel_shuffle", {"x": IMG})
    h = n.relu(n.conv("x", 4, 8, groups=2))
    s = n.op("Reshape", n.op("Transpose", n.op("Reshape", h, n.const(np.array([0, 2, 4, 8, 8], np.int64))), perm=[0, 2, 1, 3, 4]),
             n.const(np.array([0, 8, 8, 8], np.int64)))
    return n.model(n.conv(s, 8, 4, groups=2, k=1))


def pad_conv() -> onnx.ModelProto:
    n = Net("pad_conv", {"x": IMG})
    p = n.op("Pad", n.relu(n.conv("x", 4, 8)), n.const(np.array([0, 0, 2, 2, 0, 0, 2, 2], np.int64)))
    return n.model(n.conv(p, 8, 4, k=5, pad=0))


def upsample_concat() -> onnx.ModelProto:
    n = Net("upsample_concat", {"x": IMG})
    skip = n.relu(n.conv("x", 4, 4))
    low = n.relu(n.conv(n.op("MaxPool", skip, kernel_shape=[2, 2], strides=[2, 2]), 4, 8, gain=2.0))
    up = n.op("Resize", low, "", n.const(np.array([1, 1, 2, 2], np.float32)), mode="nearest")
    return n.model(n.conv(n.op("Concat", skip, up, axis=1), 12, 4))


def upconv_concat() -> onnx.ModelProto:
    n = Net("upconv_concat", {"x": IMG})
    skip = n.relu(n.conv("x", 4, 4))
    low = n.relu(n.conv(n.op("MaxPool", skip, kernel_shape=[2, 2], strides=[2, 2]), 4, 8, gain=2.0))
    up = n.op("ConvTranspose", low, n.weight(8, 4, 2, 2, fan_in=8), n.const(n.rng.standard_normal(4) * 0.1, "b"), strides=[2, 2])
    return n.model(n.conv(n.op("Concat", skip, n.relu(up), axis=1), 8, 4))


def depthwise_multiplier() -> onnx.ModelProto:
    n = Net("depthwise_multiplier", {"x": IMG})
    return n.model(n.conv(n.relu(n.conv("x", 4, 8, groups=4)), 8, 4, k=1))


def mobile_block() -> onnx.ModelProto:
    n = Net("mobile_block", {"x": IMG})
    six = (n.const(np.float32(0.0)), n.const(np.float32(6.0)))
    h = n.op("Clip", n.conv("x", 4, 16, k=1), *six)
    d = n.op("Clip", n.conv(h, 16, 16, groups=16), *six)
    return n.model(n.conv(d, 16, 8, k=1))


def attention() -> onnx.ModelProto:
    n = Net("attention", {"x": (1, 8, 16)})
    q, k, v = (n.dense("x", 16, 16) for _ in range(3))
    scores = n.op("Mul", n.op("MatMul", q, n.op("Transpose", k, perm=[0, 2, 1])), n.const(np.float32(0.25)))
    return n.model(n.dense(n.op("MatMul", n.op("Softmax", scores, axis=-1), v), 16, 16))


def lstm_cell() -> onnx.ModelProto:
    n = Net("lstm_cell", {"x": (1, 8), "h": (1, 16), "c": (1, 16)})
    gates = n.op("Add", n.dense("x", 8, 64), n.dense("h", 16, 64))
    i, f, g, o = n.op("Split", gates, outputs=4, axis=1)
    c = n.op("Add", n.op("Mul", n.op("Sigmoid", f), "c"), n.op("Mul", n.op("Sigmoid", i), n.op("Tanh", g)))
    return n.model(n.op("Mul", n.op("Sigmoid", o), n.op("Tanh", c)))


def gru_cell() -> onnx.ModelProto:
    n = Net("gru_cell", {"x": (1, 8), "h": (1, 16)})
    xr, xz, xn = n.op("Split", n.dense("x", 8, 48), outputs=3, axis=1)
    hr, hz, hn = n.op("Split", n.dense("h", 16, 48), outputs=3, axis=1)
    r, z = n.op("Sigmoid", n.op("Add", xr, hr)), n.op("Sigmoid", n.op("Add", xz, hz))
    cand = n.op("Tanh", n.op("Add", xn, n.op("Mul", r, hn)))
    return n.model(n.op("Add", n.op("Mul", n.op("Sub", n.const(np.float32(1.0)), z), cand), n.op("Mul", z, "h")))


def layer_norm() -> onnx.ModelProto:
    n = Net("layer_norm", {"x": (1, 8, 16)})
    h = n.dense("x", 16, 16, gain=2.0)
    scale, shift = n.const(1.0 + 0.2 * n.rng.standard_normal(16)), n.const(0.1 * n.rng.standard_normal(16))
    return n.model(n.dense(n.op("LayerNormalization", h, scale, shift, axis=-1, epsilon=1e-5), 16, 8))


def outlier_input() -> onnx.ModelProto:
    n = Net("outlier_input", {"x": VEC})
    return n.model(n.dense(n.relu(n.dense("x", 16, 32)), 32, 8))


def _outliers(rng: np.random.Generator, count: int) -> dict[str, np.ndarray]:
    x = rng.standard_normal((count, 16)).astype(np.float32)
    hit = rng.random((count, 16)) < 0.002
    return {"x": np.where(hit, x * 40.0, x).astype(np.float32)}


def outlier_channel() -> onnx.ModelProto:
    n = Net("outlier_channel", {"x": IMG})
    w = n.rng.standard_normal((8, 4, 3, 3)) * np.sqrt(2.0 / 36)
    w[3] *= 30.0
    h = n.relu(n.op("Conv", "x", n.const(w, "w"), pads=[1, 1, 1, 1]))
    return n.model(n.conv(h, 8, 4))


def avg_pool() -> onnx.ModelProto:
    n = Net("avg_pool", {"x": IMG})
    p = n.op("AveragePool", n.relu(n.conv("x", 4, 8)), kernel_shape=[2, 2], strides=[2, 2])
    return n.model(n.conv(p, 8, 4))


def leaky_relu() -> onnx.ModelProto:
    n = Net("leaky_relu", {"x": IMG})
    return n.model(n.conv(n.op("LeakyRelu", n.conv("x", 4, 8), alpha=0.1), 8, 4))


def gating_mul() -> onnx.ModelProto:
    n = Net("gating_mul", {"x": IMG})
    return n.model(n.conv(n.op("Mul", n.conv("x", 4, 8, gain=2.0), n.op("Sigmoid", n.conv("x", 4, 8))), 8, 4))


def mean_centering() -> onnx.ModelProto:
    n = Net("mean_centering", {"x": IMG})
    h = n.relu(n.conv("x", 4, 8))
    return n.model(n.conv(n.op("Sub", h, n.op("GlobalAveragePool", h)), 8, 4))


def split_branches() -> onnx.ModelProto:
    n = Net("split_branches", {"x": IMG})
    a, b = n.op("Split", n.conv("x", 4, 8), outputs=2, axis=1)
    return n.model(n.conv(n.op("Concat", n.relu(n.conv(a, 4, 4)), n.op("Tanh", n.conv(b, 4, 4, gain=0.3)), axis=1), 8, 4))


def relu6_mlp() -> onnx.ModelProto:
    n = Net("relu6_mlp", {"x": VEC})
    h = n.op("Clip", n.dense("x", 16, 32, gain=2.0), n.const(np.float32(0.0)), n.const(np.float32(6.0)))
    return n.model(n.dense(h, 32, 8))


def strided_cnn() -> onnx.ModelProto:
    n = Net("strided_cnn", {"x": (1, 3, 16, 16)})
    h = n.relu(n.conv("x", 3, 8, stride=2))
    h = n.relu(n.conv(h, 8, 16, stride=2))
    return n.model(n.dense(n.op("Flatten", n.op("GlobalAveragePool", h), axis=1), 16, 10))


PATTERNS: tuple[Pattern, ...] = (
    Pattern("concat_sigmoid_input", "MLP head: concat of a sigmoid output and the raw model input", concat_sigmoid_input, normal(x=VEC)),
    Pattern("concat_branch_ranges", "concat of two conv branches whose ranges differ 100x", concat_branch_ranges, normal(x=IMG)),
    Pattern("concat_tanh_relu", "concat of a tanh (fixed range) and a wide ReLU branch", concat_tanh_relu, normal(x=IMG)),
    Pattern("concat_three_inputs", "concat of sigmoid, model input and tanh", concat_three_inputs, normal(x=VEC)),
    Pattern("residual_mismatch", "residual add of branches with very different ranges", residual_mismatch, normal(x=IMG)),
    Pattern("residual_block", "ResNet block: conv-relu-conv + skip, relu, max pool", residual_block, uniform(x=IMG)),
    Pattern("sigmoid_head", "global average pool, dense, sigmoid", sigmoid_head, uniform(x=IMG)),
    Pattern("softmax_head", "MLP with a softmax output", softmax_head, normal(x=VEC)),
    Pattern("tanh_head", "MLP with a tanh output", tanh_head, normal(x=VEC)),
    Pattern("tanh_small", "tanh of small values (a near-linear output far inside (-1, 1))", tanh_small, normal(x=VEC)),
    Pattern("softmax_wide", "softmax over 64 classes with soft logits", softmax_wide, normal(x=VEC)),
    Pattern("hardswish", "conv, hard-swish, conv", hardswish, normal(x=IMG)),
    Pattern("silu", "conv, SiLU (x * sigmoid(x)), conv", silu, normal(x=IMG)),
    Pattern("gelu", "dense, GELU (erf form), dense", gelu, normal(x=VEC)),
    Pattern("squeeze_excite", "squeeze-excite: mean, 1x1 convs, sigmoid, channel gate", squeeze_excite, uniform(x=IMG)),
    Pattern("channel_shuffle", "grouped conv, channel shuffle (reshape/transpose), grouped 1x1", channel_shuffle, normal(x=IMG)),
    Pattern("pad_conv", "explicit zero pad before a 5x5 conv", pad_conv, normal(x=IMG)),
    Pattern("upsample_concat", "U-Net step: pool, conv, nearest upsample, concat with the skip", upsample_concat, normal(x=IMG)),
    Pattern("upconv_concat", "U-Net step with a 2x2 stride-2 transposed conv (up-convolution) and concat", upconv_concat, normal(x=IMG)),
    Pattern("depthwise_multiplier", "depthwise conv with depth multiplier 2", depthwise_multiplier, normal(x=IMG)),
    Pattern("mobile_block", "MobileNet block: 1x1 expand, ReLU6, depthwise, ReLU6, 1x1 project", mobile_block, normal(x=IMG)),
    Pattern("attention", "self-attention: QK^T, scale, softmax, times V, projection", attention, normal(x=(1, 8, 16))),
    Pattern("lstm_cell", "one LSTM cell step (gates, sigmoid/tanh, cell update)", lstm_cell, normal(x=(1, 8), h=(1, 16), c=(1, 16))),
    Pattern("gru_cell", "one GRU cell step", gru_cell, normal(x=(1, 8), h=(1, 16))),
    Pattern("layer_norm", "dense, layer normalization, dense", layer_norm, normal(x=(1, 8, 16))),
    Pattern("outlier_input", "MLP on inputs with rare 40x outliers", outlier_input, _outliers),
    Pattern("outlier_channel", "conv with one channel 30x larger than the others", outlier_channel, normal(x=IMG)),
    Pattern("avg_pool", "conv, relu, 2x2 average pool, conv", avg_pool, normal(x=IMG)),
    Pattern("leaky_relu", "conv, leaky ReLU, conv", leaky_relu, normal(x=IMG)),
    Pattern("gating_mul", "product of a conv branch and a sigmoid gate", gating_mul, normal(x=IMG)),
    Pattern("mean_centering", "activation minus its spatial mean (broadcast sub)", mean_centering, uniform(x=IMG)),
    Pattern("split_branches", "split channels, different branches, concat", split_branches, normal(x=IMG)),
    Pattern("relu6_mlp", "dense, ReLU6, dense", relu6_mlp, normal(x=VEC)),
    Pattern("strided_cnn", "strided convs, global pool, dense classifier", strided_cnn, uniform(x=(1, 3, 16, 16))),
)
BY_NAME = {p.name: p for p in PATTERNS}
