"""Small PyTorch modules, one per ATen mapping, for the torch frontend tests.

Each case names the module, its input shapes and the source ops the import
must contain, so a mapping that silently decomposes (a hardswish turned into
a soup of arithmetic, say) fails its test.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn


class Fn(nn.Module):
    """A module whose forward is `fn(*inputs)`, so one-op cases need no class each."""

    def __init__(self, fn: Callable[..., torch.Tensor], **children: nn.Module) -> None:
        super().__init__()
        self.fn = fn
        for name, child in children.items():
            self.add_module(name, child)

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None, z: torch.Tensor | None = None) -> torch.Tensor:
        return self.fn(self, *(t for t in (x, y, z) if t is not None))


def _bn(channels: int, affine: bool = True) -> nn.BatchNorm2d:
    bn = nn.BatchNorm2d(channels, affine=affine)
    with torch.no_grad():
        bn.running_mean.copy_(torch.randn(channels) * 0.3)
        bn.running_var.copy_(torch.rand(channels) + 0.5)
        if affine:
            bn.weight.copy_(torch.randn(channels) * 0.5 + 1)
            bn.bias.copy_(torch.randn(channels) * 0.2)
    return bn


def _bn1d(channels: int) -> nn.BatchNorm1d:
    bn = nn.BatchNorm1d(channels)
    with torch.no_grad():
        bn.running_mean.copy_(torch.randn(channels) * 0.3)
        bn.running_var.copy_(torch.rand(channels) + 0.5)
    return bn


def _layer_norm(size: int) -> nn.LayerNorm:
    norm = nn.LayerNorm(size)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(size) * 0.5 + 1)
        norm.bias.copy_(torch.randn(size) * 0.2)
    return norm


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[], nn.Module]
    shapes: tuple[tuple[int, ...], ...]
    ops: frozenset[str]


def _case(name: str, build: Callable[[], nn.Module], shapes: list[tuple[int, ...]], *ops: str) -> Case:
    return Case(name, build, tuple(shapes), frozenset(ops))


X = (1, 4, 8, 8)
CASES = [
    _case("conv2d", lambda: nn.Conv2d(4, 6, 3, stride=2, padding=1), [X], "Conv"),
    _case("conv2d_dilated_grouped", lambda: nn.Conv2d(4, 8, 3, padding=2, dilation=2, groups=2, bias=False), [X], "Conv"),
    _case("conv2d_depthwise", lambda: nn.Conv2d(4, 4, 3, groups=4), [X], "Conv"),
    _case("conv2d_same", lambda: nn.Conv2d(4, 5, 3, padding="same"), [X], "Conv"),
    _case("conv1d", lambda: nn.Conv1d(3, 5, 3, stride=2, padding=1), [(2, 3, 11)], "Conv"),
    _case("conv_transpose_up2", lambda: nn.ConvTranspose2d(4, 3, 2, stride=2), [X], "ConvTranspose"),
    _case("conv_transpose_general", lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2), [X], "ConvTranspose"),
    _case("linear", lambda: nn.Linear(12, 5), [(3, 12)], "Gemm"),
    _case("linear_3d", lambda: nn.Linear(12, 5), [(2, 3, 12)], "MatMul", "Add"),
    _case("linear_3d_no_bias", lambda: nn.Linear(12, 5, bias=False), [(2, 3, 12)], "MatMul"),
    _case("addmm", lambda: Fn(lambda m, x, w: torch.addmm(torch.ones(5), x, w, beta=0.5, alpha=2.0)), [(3, 4), (4, 5)], "Gemm"),
    _case("matmul", lambda: Fn(lambda m, x, y: x @ y), [(2, 3, 4), (2, 4, 5)], "MatMul"),
    _case("mm", lambda: Fn(lambda m, x, y: x @ y), [(3, 4), (4, 5)], "MatMul"),
    _case("batch_norm", lambda: _bn(4), [X], "BatchNormalization"),
    _case("batch_norm_no_affine", lambda: _bn(4, affine=False), [X], "BatchNormalization"),
    _case("batch_norm_1d", lambda: _bn1d(6), [(3, 6)], "BatchNormalization"),
    _case("relu", lambda: nn.ReLU(), [X], "Relu"),
    _case("relu6", lambda: nn.ReLU6(), [X], "Clip"),
    _case("hardtanh", lambda: nn.Hardtanh(-0.5, 0.7), [X], "Clip"),
    _case("clamp_min", lambda: Fn(lambda m, x: torch.clamp(x, min=-0.25)), [X], "Clip"),
    _case("leaky_relu", lambda: nn.LeakyReLU(0.1), [X], "LeakyRelu"),
    _case("sigmoid", lambda: nn.Sigmoid(), [X], "Sigmoid"),
    _case("tanh", lambda: nn.Tanh(), [X], "Tanh"),
    _case("hardsigmoid", lambda: nn.Hardsigmoid(), [X], "HardSigmoid"),
    _case("hardswish", lambda: nn.Hardswish(), [X], "HardSwish"),
    _case("silu", lambda: nn.SiLU(), [X], "Sigmoid", "Mul"),
    _case("gelu", lambda: nn.GELU(), [X], "Gelu"),
    _case("gelu_tanh", lambda: nn.GELU(approximate="tanh"), [X], "Gelu"),
    _case("softmax", lambda: nn.Softmax(dim=1), [X], "Softmax"),
    _case("layer_norm", lambda: _layer_norm(8), [(2, 3, 8)], "LayerNormalization"),
    _case("attention", lambda: Fn(lambda m, q, k, v: torch.softmax(q @ k.transpose(-2, -1) / 8 ** 0.5, -1) @ v), [(1, 2, 5, 8)] * 3,
          "MatMul", "Softmax", "Transpose"),
    _case("transformer_encoder_layer", lambda: nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True), [(1, 5, 16)],
          "MatMul", "Softmax", "LayerNormalization"),
    _case("scaled_dot_product_attention", lambda: Fn(lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v)), [(1, 2, 5, 8)] * 3,
          "MatMul", "Softmax", "Mul"),
    _case("layer_norm_two_axes", lambda: nn.LayerNorm([8, 8], elementwise_affine=False), [X], "LayerNormalization"),
    _case("max_pool", lambda: nn.MaxPool2d(3, stride=2, padding=1), [X], "MaxPool"),
    _case("max_pool_ceil_dilated", lambda: nn.MaxPool2d(2, stride=2, dilation=2, ceil_mode=True), [(1, 2, 9, 9)], "MaxPool"),
    _case("avg_pool_count_pad", lambda: nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=True), [X], "AveragePool"),
    _case("avg_pool_no_count_pad", lambda: nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False), [X], "AveragePool"),
    _case("avg_pool_ceil_count_pad", lambda: nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True), [(1, 2, 8, 8)], "AveragePool"),
    _case("avg_pool_ceil_no_count_pad", lambda: nn.AvgPool2d(2, stride=2, ceil_mode=True, count_include_pad=False), [(1, 2, 7, 7)], "AveragePool"),
    _case("adaptive_avg_pool_1", lambda: nn.AdaptiveAvgPool2d(1), [X], "GlobalAveragePool"),
    _case("adaptive_avg_pool_2", lambda: nn.AdaptiveAvgPool2d(2), [X], "AveragePool"),
    _case("mean_spatial", lambda: Fn(lambda m, x: x.mean((2, 3))), [X], "ReduceMean"),
    _case("mean_keepdim", lambda: Fn(lambda m, x: x.mean(-1, keepdim=True)), [X], "ReduceMean"),
    _case("scalar_arithmetic", lambda: Fn(lambda m, x: (x + 1.5) * 2 - 0.25), [X], "Add", "Mul", "Sub"),
    _case("scalar_division", lambda: Fn(lambda m, x: x / 3 + 1 / (x * x + 1)), [X], "Div"),
    _case("reverse_sub", lambda: Fn(lambda m, x: 1 - x), [X], "Sub"),
    _case("add_alpha", lambda: Fn(lambda m, x, y: torch.add(x, y, alpha=0.5)), [X, X], "Add", "Mul"),
    _case("broadcast", lambda: Fn(lambda m, x, y, z: (x + y) * z - y / (z * z + 1)), [X, (4, 1, 1), (1, 1, 8)], "Add", "Mul", "Sub", "Div"),
    _case("elementwise_math", lambda: Fn(lambda m, x: torch.erf(torch.rsqrt(x * x + 1).pow(2) + torch.exp(-x).sqrt())), [X],
          "Erf", "Reciprocal", "Sqrt", "Pow", "Exp", "Neg"),
    _case("factories_and_copies", lambda: Fn(lambda m, x: x * torch.arange(8.0) + torch.ones(8) + x.detach().double().float()), [X],
          "Identity", "Mul", "Add"),
    _case("cast", lambda: Fn(lambda m, x: (x * 4).to(torch.int32).to(torch.float32) * 0.5), [X], "Cast"),
    _case("cat", lambda: Fn(lambda m, x, y: torch.cat([x, y, x], dim=1)), [X, (1, 2, 8, 8)], "Concat"),
    _case("reshape_flatten", lambda: Fn(lambda m, x: torch.flatten(x, 1).reshape(1, 16, -1).view(2, -1)), [X], "Reshape"),
    _case("squeeze_unsqueeze", lambda: Fn(lambda m, x: x.mean(1, keepdim=True).squeeze(1).unsqueeze(-1).squeeze()), [X], "Squeeze", "Unsqueeze"),
    _case("permute_transpose", lambda: Fn(lambda m, x: x.permute(0, 2, 3, 1).transpose(1, 2)), [X], "Transpose"),
    _case("constant_pad", lambda: Fn(lambda m, x: F.pad(x, (1, 2, 0, 3), value=0.5)), [X], "Pad"),
    _case("upsample_scale", lambda: nn.Upsample(scale_factor=2, mode="nearest"), [X], "Resize"),
    _case("upsample_size", lambda: Fn(lambda m, x: F.interpolate(x, size=(12, 20), mode="nearest")), [X], "Resize"),
    _case("slice", lambda: Fn(lambda m, x: x[:, 1:3, ::2, -5:]), [X], "Slice"),
    _case("select", lambda: Fn(lambda m, x: x[:, 2] + x[:, -1]), [X], "Slice", "Squeeze"),
    _case("split", lambda: Fn(lambda m, x: torch.split(x, [1, 3], dim=1)[1] * 2), [X], "Split"),
    _case("chunk", lambda: Fn(lambda m, x: torch.cat(torch.chunk(x, 2, dim=2)[::-1], dim=2)), [X], "Split", "Concat"),
    _case("dropout", lambda: nn.Dropout(0.5), [X], "Identity"),
]
