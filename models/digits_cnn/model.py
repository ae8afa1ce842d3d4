"""A small CNN for scikit-learn's bundled 8x8 digits: the project's real-data model.

Its weights (`weights.npz`) come from `train.py`, which is seeded and
deterministic; the held-out split is fixed by `SPLIT_SEED`, so the float and
int8 accuracies that the tests check are reproducible numbers.

Inputs are (1, 1, 8, 8) float images scaled to [0, 1]; sample sets are shaped
(N, *input_shape) as the import stage expects.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

WEIGHTS = Path(__file__).resolve().parent / "weights.npz"
SPLIT_SEED = 0
TEST_FRACTION = 0.2
INPUT_SHAPE = (1, 1, 8, 8)


class DigitsCNN(nn.Module):
    """Two 3x3 conv layers, a max pool and two fully connected layers (about 10k weights)."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(16 * 4 * 4, 32), nn.ReLU(), nn.Linear(32, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train images, test images, train labels, test labels); images are (N, 1, 8, 8) float32 in [0, 1]."""
    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None]
    labels = digits.target.astype(np.int64)
    return train_test_split(images, labels, test_size=TEST_FRACTION, random_state=SPLIT_SEED, stratify=labels)


def model() -> nn.Module:
    net = DigitsCNN()
    with np.load(WEIGHTS) as saved:
        net.load_state_dict({k: torch.from_numpy(saved[k].copy()) for k in saved.files})
    return net.eval()


def example_inputs() -> tuple[torch.Tensor]:
    return (torch.zeros(INPUT_SHAPE),)


def calibration_data() -> np.ndarray:
    """The training images, shaped (N, 1, 1, 8, 8): calibration never sees the test split."""
    train, _, _, _ = split()
    return train[:, None]


def test_data() -> tuple[np.ndarray, np.ndarray]:
    """The held-out split: images (N, 1, 1, 8, 8) float32 and labels (N,) int64."""
    _, test, _, labels = split()
    return test[:, None], labels
