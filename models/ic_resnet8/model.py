"""MLPerf Tiny image classification reference model: ResNet-8 on 32x32 RGB (CIFAR-10), 10 classes.

The layers are those of the MLPerf Tiny Keras reference: a 3x3 convolution
with 16 filters, three residual stacks of two 3x3 convolutions (16, 32 at
stride 2, 64 at stride 2) with a 1x1 stride-2 convolution on the shortcut
where the shape changes, an 8x8 average pool, a 10-way dense layer and
softmax. Keras pads 'same' on even sizes by one row and column below and
right, so the stride-2 layers pad explicitly. No data set can be fetched, so
the weights are seeded rather than trained: He-normal kernels, batch-norm
running statistics measured on seeded image-like inputs, and a readout
scaled so the logits spread as a trained classifier's do.

Everything random comes from NumPy's seeded generator and the statistics are
computed in float64 before rounding to float32, so the model is the same on
every CPU. Inputs are (1, 3, 32, 32) RGB pixel values in [0, 255]: the
reference trains on CIFAR-10's raw pixel values, without rescaling.
"""
from __future__ import annotations

import functools
import itertools

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

INPUT_SHAPE = (1, 3, 32, 32)
CLASSES = 10
WIDTHS = (16, 32, 64)
WEIGHT_SEED = 0
BN_SHIFT = 1.0
STATS_SEED = 1
STATS_SAMPLES = 64
LOGIT_STD = 3.0
READOUT_RANK = 4
CALIBRATION_SEED = 2
CALIBRATION_SAMPLES = 16


def _conv3x3(cin: int, cout: int, stride: int) -> nn.Module:
    """A 3x3 convolution padded as Keras 'same' does: one row and column below and right at stride 2."""
    if stride == 1:
        return nn.Conv2d(cin, cout, 3, padding=1)
    return nn.Sequential(nn.ZeroPad2d((0, 1, 0, 1)), nn.Conv2d(cin, cout, 3, stride=stride))


class Stack(nn.Module):
    """conv-BN-ReLU, conv-BN, added to the input (through a 1x1 convolution when the shape changes), ReLU."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = _conv3x3(cin, cout, stride), nn.BatchNorm2d(cout)
        self.conv2, self.bn2 = _conv3x3(cout, cout, 1), nn.BatchNorm2d(cout)
        self.shortcut = nn.Conv2d(cin, cout, 1, stride=stride) if stride != 1 or cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(self.shortcut(x) + y)


class ResNet8(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, WIDTHS[0], 3, padding=1), nn.BatchNorm2d(WIDTHS[0]), nn.ReLU())
        self.stacks = nn.Sequential(
            Stack(WIDTHS[0], WIDTHS[0], 1), Stack(WIDTHS[0], WIDTHS[1], 2), Stack(WIDTHS[1], WIDTHS[2], 2),
        )
        self.head = nn.Sequential(nn.AvgPool2d(8), nn.Flatten(), nn.Linear(WIDTHS[2], CLASSES), nn.Softmax(dim=1))

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.head(self.stacks(self.stem(image)))


def _smooth(rng: np.random.Generator, lead: tuple[int, ...], size: int, cells: int) -> np.ndarray:
    """Unit noise on a coarse cells x cells grid, bilinearly interpolated to size x size."""
    pos = np.linspace(0, cells - 1, size)
    low = np.minimum(pos.astype(int), cells - 2)
    frac = pos - low
    up = np.zeros((size, cells))
    up[np.arange(size), low] = 1 - frac
    up[np.arange(size), low + 1] = frac
    return up @ rng.standard_normal((*lead, cells, cells)) @ up.T


def _images(count: int, seed: int) -> np.ndarray:
    """`count` CIFAR-like RGB arrays (count, 3, 32, 32) of pixel values in [0, 255], float64.

    A centred object on a background, as CIFAR-10 photographs are: a smooth
    shaded background in one colour, an elliptical soft-edged object in
    another, texture shared by the colour channels, and pixel noise.
    """
    rng = np.random.default_rng(seed)
    size = INPUT_SHAPE[2]
    yy, xx = np.mgrid[0:size, 0:size] / (size - 1)
    background = rng.uniform(0.2, 0.8, (count, 3, 1, 1)) + 0.12 * _smooth(rng, (count, 1), size, 3)
    cy, cx = rng.uniform(0.4, 0.6, (2, count, 1, 1))
    ry, rx = rng.uniform(0.15, 0.35, (2, count, 1, 1))
    inside = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2
    mask = (1 / (1 + np.exp(6 * (inside - 1))))[:, None]
    obj = rng.uniform(0.1, 0.9, (count, 3, 1, 1)) + 0.1 * _smooth(rng, (count, 1), size, 8)
    scene = background * (1 - mask) + obj * mask + 0.02 * rng.standard_normal((count, 3, size, size))
    return 255.0 * np.clip(scene, 0.0, 1.0)


def _seed_weights(net: nn.Module, rng: np.random.Generator) -> None:
    """He-normal kernels and small biases; batch-norm scales near 1 and shifts near BN_SHIFT.

    With shifts centred on 0 an untrained network is chaotic: each layer
    roughly doubles a small perturbation such as int8 rounding, so the
    output of a deep one is mostly quantization noise. Shifts near +1 keep
    most ReLUs open (about 85%) and the noise from growing layer on layer.
    """
    def put(param: torch.Tensor, values: np.ndarray) -> None:
        param.copy_(torch.from_numpy(values.astype(np.float32)))

    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                put(m.weight, rng.standard_normal(m.weight.shape) * np.sqrt(2.0 / m.weight[0].numel()))
                put(m.bias, 0.05 * rng.standard_normal(m.bias.shape))
            elif isinstance(m, nn.BatchNorm2d):
                put(m.weight, 1.0 + 0.1 * rng.standard_normal(m.weight.shape))
                put(m.bias, BN_SHIFT + 0.1 * rng.standard_normal(m.bias.shape))


def _conv64(conv: nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
    """`conv` in float64 as a sum over its kernel taps: torch has no fast float64 convolution on CPU."""
    (ph, pw), (sh, sw), (kh, kw) = conv.padding, conv.stride, conv.kernel_size
    x = F.pad(x, (pw, pw, ph, ph))
    oh, ow = (x.shape[2] - kh) // sh + 1, (x.shape[3] - kw) // sw + 1
    out = conv.bias.view(1, -1, 1, 1)
    for i, j in itertools.product(range(kh), range(kw)):
        tap = x[:, :, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw]
        w = conv.weight[:, :, i, j]
        out = out + (tap * w.view(1, -1, 1, 1) if conv.groups > 1 else torch.einsum("nchw,oc->nohw", tap, w))
    return out


def _float64_features(net: ResNet8, samples: np.ndarray) -> torch.Tensor:
    """The pooled features of `samples` in float64, with every batch norm accumulating its running statistics.

    Float64 keeps the statistics, once rounded to float32, independent of
    the CPU's vector unit and thread count.
    """
    convs = [m for m in net.modules() if isinstance(m, nn.Conv2d)]
    net.double().eval()
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.reset_running_stats()
            m.momentum = None  # a cumulative average over the whole pass
            m.train()
    for conv in convs:
        conv.forward = functools.partial(_conv64, conv)
    try:
        with torch.no_grad():
            return net.head[:2](net.stacks(net.stem(torch.from_numpy(samples))))
    finally:
        for conv in convs:
            del conv.forward
        net.float().eval()


def _fit_readout(fc: nn.Linear, features: torch.Tensor, rng: np.random.Generator) -> None:
    """A readout along the features' main directions, scaled so each logit has mean 0 and deviation LOGIT_STD.

    Untrained pooled features differ little between inputs. A trained
    readout weighs the directions in which inputs differ; this one mixes
    the READOUT_RANK principal directions of the features over the samples,
    and spreads the logits over several units as a trained classifier's are.
    """
    feats = features.numpy()
    _, _, principal = np.linalg.svd(feats - feats.mean(axis=0), full_matrices=False)
    principal = principal[:READOUT_RANK]
    largest = principal[np.arange(READOUT_RANK), np.abs(principal).argmax(axis=1)]
    principal *= np.sign(largest)[:, None]  # singular vectors' signs are arbitrary: fix them
    direction = rng.standard_normal((fc.out_features, READOUT_RANK)) @ principal
    raw = feats @ direction.T
    gain = LOGIT_STD / raw.std(axis=0)
    with torch.no_grad():
        fc.weight.copy_(torch.from_numpy((direction * gain[:, None]).astype(np.float32)))
        fc.bias.copy_(torch.from_numpy((-raw.mean(axis=0) * gain).astype(np.float32)))


def model() -> nn.Module:
    net = ResNet8()
    rng = np.random.default_rng(WEIGHT_SEED)
    _seed_weights(net, rng)
    features = _float64_features(net, _images(STATS_SAMPLES, STATS_SEED))
    _fit_readout(net.head[2], features, rng)
    return net.eval()


def example_inputs() -> tuple[torch.Tensor]:
    return (torch.zeros(INPUT_SHAPE),)


def samples(count: int, seed: int) -> np.ndarray:
    """`count` seeded CIFAR-like inputs, shaped (count, *INPUT_SHAPE), float32."""
    return _images(count, seed).astype(np.float32).reshape(count, *INPUT_SHAPE)


def calibration_data() -> np.ndarray:
    """16 seeded CIFAR-like samples shaped (N, 1, 3, 32, 32), float32 pixel values in [0, 255]."""
    return samples(CALIBRATION_SAMPLES, CALIBRATION_SEED)
