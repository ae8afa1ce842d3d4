"""MLPerf Tiny keyword spotting reference model: DS-CNN on 49x10 MFCC features, 12 classes.

The layers are those of the MLPerf Tiny Keras reference (Hello Edge's DS-CNN
small): a 10x4 stride-2 convolution with 64 filters, four depthwise-separable
blocks, dropout, a 24x5 average pool, a 12-way dense layer and softmax. Keras
pads 'same' asymmetrically (the odd row goes below), so the stem pads
explicitly. No data set can be fetched, so the weights are seeded rather than
trained: He-normal kernels, batch-norm running statistics measured on
seeded MFCC-like features, and a readout scaled so the logits spread as a
trained classifier's do.

The seeding is the zoo's shared recipe (`../_kit/zoo.py`), the same on
every CPU. Inputs are (1, 1, 49, 10): batch, channel, time frames, MFCC
coefficients.
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

INPUT_SHAPE = (1, 1, 49, 10)
CLASSES = 12
FILTERS = 64
STATS_SAMPLES = 64
CALIBRATION_SAMPLES = 32


def _separable(channels: int) -> nn.Sequential:
    """Depthwise 3x3 + BN + ReLU, then pointwise 1x1 + BN + ReLU."""
    return nn.Sequential(
        nn.Conv2d(channels, channels, 3, padding=1, groups=channels), nn.BatchNorm2d(channels), nn.ReLU(),
        nn.Conv2d(channels, channels, 1), nn.BatchNorm2d(channels), nn.ReLU(),
    )


class DSCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.ZeroPad2d((1, 1, 4, 5)),  # Keras 'same' for a 10x4 window, stride 2, on 49x10: 25x5 out
            nn.Conv2d(1, FILTERS, (10, 4), stride=2), nn.BatchNorm2d(FILTERS), nn.ReLU(), nn.Dropout(0.2),
        )
        self.blocks = nn.Sequential(*(_separable(FILTERS) for _ in range(4)))
        self.head = nn.Sequential(
            nn.Dropout(0.4), nn.AvgPool2d((24, 5)), nn.Flatten(), nn.Linear(FILTERS, CLASSES), nn.Softmax(dim=1),
        )

    def forward(self, mfcc: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(mfcc)))


def _mfcc(count: int, seed: int) -> np.ndarray:
    """`count` MFCC-like feature maps (count, 49, 10), float64.

    Each is a spoken word over background: coefficients vary smoothly in time
    (noise smoothed over about 7 frames), the lower coefficients vary most,
    and a word raises the energy (c0) and shapes the spectrum for about 20
    frames around a random centre. Values are roughly zero-mean within a
    few units, as normalized MFCCs are.
    """
    rng = np.random.default_rng(seed)
    frames, coeffs = INPUT_SHAPE[2], INPUT_SHAPE[3]
    window = np.hanning(9)[1:-1]
    noise = rng.standard_normal((count, frames + len(window) - 1, coeffs))
    smooth = np.lib.stride_tricks.sliding_window_view(noise, len(window), axis=1) @ (window / window.sum())
    spread = 2.5 / (1.0 + 0.4 * np.arange(coeffs))
    t = np.arange(frames)
    centre = rng.uniform(15, 34, (count, 1))
    envelope = np.exp(-0.5 * ((t - centre) / rng.uniform(5, 9, (count, 1))) ** 2)
    shape = rng.standard_normal((count, coeffs)) * spread
    shape[:, 0] = rng.uniform(3, 6, count)
    word = envelope[:, :, None] * shape[:, None, :]
    return 2.0 * smooth * spread + word - word.mean(axis=(1, 2), keepdims=True)


def model() -> nn.Module:
    net = DSCNN()
    pooled = nn.Sequential(net.stem, net.blocks, net.head[:3])
    return zoo.seeded_classifier(net, _mfcc(STATS_SAMPLES, zoo.STATS_SEED)[:, None], pooled, net.head[3])


def example_inputs() -> tuple[torch.Tensor]:
    return (torch.zeros(INPUT_SHAPE),)


def samples(count: int, seed: int) -> np.ndarray:
    """`count` seeded MFCC-like inputs, shaped (count, *INPUT_SHAPE), float32."""
    return _mfcc(count, seed).astype(np.float32).reshape(count, *INPUT_SHAPE)


def calibration_data() -> np.ndarray:
    """32 seeded MFCC-like samples shaped (N, 1, 1, 49, 10), float32."""
    return samples(CALIBRATION_SAMPLES, zoo.CALIBRATION_SEED)
