"""MLPerf Tiny visual wake words reference model: MobileNetV1 (width 0.25) on 96x96 RGB, person / no person.

The layers are those of the MLPerf Tiny Keras reference: a 3x3 stride-2
convolution with 8 filters, the 13 depthwise-separable blocks of MobileNetV1
with its stride pattern (channels 16 to 256), plain ReLU after every batch
norm, a 3x3 average pool over the final map, a 2-way dense layer and softmax.
Keras pads 'same' on even sizes by one row and column below and right, so the
stride-2 layers pad explicitly. No data set can be fetched, so the weights
are seeded rather than trained: He-normal kernels, batch-norm running
statistics measured on seeded image-like inputs, and a readout scaled so the
two logits spread as a trained classifier's do.

The seeding is the zoo's shared recipe (`../_kit/zoo.py`), the same on
every CPU. Inputs are (1, 3, 96, 96) RGB in [0, 1], the reference's 1/255
scaling.
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

INPUT_SHAPE = (1, 3, 96, 96)
CLASSES = 2
STEM = 8
# (output channels, stride) of each depthwise-separable block.
BLOCKS = ((16, 1), (32, 2), (32, 1), (64, 2), (64, 1), (128, 2), (128, 1), (128, 1), (128, 1), (128, 1), (128, 1),
          (256, 2), (256, 1))
STATS_SAMPLES = 24
CALIBRATION_SAMPLES = 16


def _conv3x3(conv: nn.Conv2d, stride: int) -> nn.Module:
    """A 3x3 convolution padded as Keras 'same' does: one row and column below and right at stride 2."""
    return nn.Sequential(nn.ZeroPad2d((0, 1, 0, 1)), conv) if stride == 2 else conv


def _separable(cin: int, cout: int, stride: int) -> nn.Sequential:
    """Depthwise 3x3 + BN + ReLU, then pointwise 1x1 + BN + ReLU."""
    depthwise = nn.Conv2d(cin, cin, 3, stride=stride, padding=0 if stride == 2 else 1, groups=cin)
    return nn.Sequential(
        _conv3x3(depthwise, stride), nn.BatchNorm2d(cin), nn.ReLU(),
        nn.Conv2d(cin, cout, 1), nn.BatchNorm2d(cout), nn.ReLU(),
    )


class MobileNetV1(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(_conv3x3(nn.Conv2d(3, STEM, 3, stride=2), 2), nn.BatchNorm2d(STEM), nn.ReLU())
        widths = (STEM,) + tuple(c for c, _ in BLOCKS)
        self.blocks = nn.Sequential(*(_separable(cin, cout, s) for cin, (cout, s) in zip(widths, BLOCKS)))
        self.head = nn.Sequential(nn.AvgPool2d(3), nn.Flatten(), nn.Linear(widths[-1], CLASSES), nn.Softmax(dim=1))

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(image)))


def _images(count: int, seed: int) -> np.ndarray:
    """`count` image-like RGB arrays (count, 3, 96, 96) in [0, 1], float64.

    Scenes, not white noise: a lit background with a vertical gradient,
    large smooth shading and finer texture shared by the colour channels,
    a slight colour cast, and in half of them a tall soft-edged figure in
    its own colour, plus a little sensor noise.
    """
    rng = np.random.default_rng(seed)
    size = INPUT_SHAPE[2]
    yy, xx = np.mgrid[0:size, 0:size] / (size - 1)
    tilt = rng.uniform(-0.3, 0.3, (count, 1, 1, 1)) * (yy - 0.5)
    light = rng.uniform(0.3, 0.7, (count, 1, 1, 1)) + tilt
    shade = 0.12 * zoo.smooth_noise(rng, (count, 1), size, 4) + 0.05 * zoo.smooth_noise(rng, (count, 1), size, 16)
    cast = 0.04 * zoo.smooth_noise(rng, (count, 3), size, 3)
    cy, cx = rng.uniform(0.35, 0.65, (2, count, 1, 1))
    height, width = rng.uniform(0.25, 0.45, count)[:, None, None], rng.uniform(0.08, 0.15, count)[:, None, None]
    inside = ((yy - cy) / height) ** 2 + ((xx - cx) / width) ** 2
    figure = (1 / (1 + np.exp(8 * (inside - 1))))[:, None] * (rng.random(count) < 0.5)[:, None, None, None]
    colour = rng.uniform(0.1, 0.9, (count, 3, 1, 1))
    scene = light + shade + cast
    scene = scene * (1 - figure) + colour * figure + 0.01 * rng.standard_normal(scene.shape)
    return np.clip(scene, 0.0, 1.0)


def model() -> nn.Module:
    net = MobileNetV1()
    pooled = nn.Sequential(net.stem, net.blocks, net.head[:2])
    return zoo.seeded_classifier(net, _images(STATS_SAMPLES, zoo.STATS_SEED), pooled, net.head[2])


def example_inputs() -> tuple[torch.Tensor]:
    return (torch.zeros(INPUT_SHAPE),)


def samples(count: int, seed: int) -> np.ndarray:
    """`count` seeded image-like inputs, shaped (count, *INPUT_SHAPE), float32."""
    return _images(count, seed).astype(np.float32).reshape(count, *INPUT_SHAPE)


def calibration_data() -> np.ndarray:
    """16 seeded image-like samples shaped (N, 1, 3, 96, 96), float32 in [0, 1]."""
    return samples(CALIBRATION_SAMPLES, zoo.CALIBRATION_SEED)
