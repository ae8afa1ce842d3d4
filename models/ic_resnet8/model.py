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

The seeding is the zoo's shared recipe (`../_kit/zoo.py`), the same on
every CPU. Inputs are (1, 3, 32, 32) RGB pixel values in [0, 255]: the
reference trains on CIFAR-10's raw pixel values, without rescaling.

The .pt2 variant (../ic_resnet8_pt2) records the line numbers of the
forward() methods below in its stack traces: a change that moves them
must be followed by re-running its export.py (the tests compare bytes).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

# ../_kit/zoo.py, listed in model.toml's model.depends: the build re-runs import when it changes.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "_kit"))
import zoo  # noqa: E402

INPUT_SHAPE = (1, 3, 32, 32)
CLASSES = 10
WIDTHS = (16, 32, 64)
STATS_SAMPLES = 64
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


def _images(count: int, seed: int) -> np.ndarray:
    """`count` CIFAR-like RGB arrays (count, 3, 32, 32) of pixel values in [0, 255], float64.

    A centred object on a background, as CIFAR-10 photographs are: a smooth
    shaded background in one colour, an elliptical soft-edged object in
    another, texture shared by the colour channels, and pixel noise.
    """
    rng = np.random.default_rng(seed)
    size = INPUT_SHAPE[2]
    yy, xx = np.mgrid[0:size, 0:size] / (size - 1)
    background = rng.uniform(0.2, 0.8, (count, 3, 1, 1)) + 0.12 * zoo.smooth_noise(rng, (count, 1), size, 3)
    cy, cx = rng.uniform(0.4, 0.6, (2, count, 1, 1))
    ry, rx = rng.uniform(0.15, 0.35, (2, count, 1, 1))
    inside = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2
    mask = (1 / (1 + np.exp(6 * (inside - 1))))[:, None]
    obj = rng.uniform(0.1, 0.9, (count, 3, 1, 1)) + 0.1 * zoo.smooth_noise(rng, (count, 1), size, 8)
    scene = background * (1 - mask) + obj * mask + 0.02 * rng.standard_normal((count, 3, size, size))
    return 255.0 * np.clip(scene, 0.0, 1.0)


def model() -> nn.Module:
    net = ResNet8()
    pooled = nn.Sequential(net.stem, net.stacks, net.head[:2])
    return zoo.seeded_classifier(net, _images(STATS_SAMPLES, zoo.STATS_SEED), pooled, net.head[2])


def example_inputs() -> tuple[torch.Tensor]:
    return (torch.zeros(INPUT_SHAPE),)


def samples(count: int, seed: int) -> np.ndarray:
    """`count` seeded CIFAR-like inputs, shaped (count, *INPUT_SHAPE), float32."""
    return _images(count, seed).astype(np.float32).reshape(count, *INPUT_SHAPE)


def calibration_data() -> np.ndarray:
    """16 seeded CIFAR-like samples shaped (N, 1, 3, 32, 32), float32 pixel values in [0, 255]."""
    return samples(CALIBRATION_SAMPLES, zoo.CALIBRATION_SEED)
