"""MLPerf Tiny anomaly detection reference model: a fully connected autoencoder on 5 log-mel frames.

The layers are those of the MLPerf Tiny Keras reference (the DCASE 2020
baseline): 640 inputs (5 frames x 128 mel bands), four dense layers of 128,
an 8-wide bottleneck, four dense layers of 128, each followed by batch norm
and ReLU, and a linear 640-wide output that reconstructs the input. No data
set can be fetched, so the weights are seeded rather than trained: He-normal
kernels, batch-norm running statistics measured on seeded log-mel-like
frames, and an output layer fitted by least squares to reconstruct those
frames, as training would.

The seeding is the zoo's shared recipe (`../_kit/zoo.py`) and the fit is
computed in float64 too, so the model is the same on every CPU. Inputs are (1, 640): five consecutive frames of 128
log-mel energies in dB, frame after frame.
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

FRAMES = 5
MELS = 128
INPUT_SHAPE = (1, FRAMES * MELS)
WIDTHS = (FRAMES * MELS, 128, 128, 128, 128, 8, 128, 128, 128, 128)
STATS_SAMPLES = 512
RIDGE = 30.0
CALIBRATION_SAMPLES = 64


class AutoEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Sequential(*(
            nn.Sequential(nn.Linear(cin, cout), nn.BatchNorm1d(cout), nn.ReLU()) for cin, cout in zip(WIDTHS, WIDTHS[1:])
        ))
        self.output = nn.Linear(WIDTHS[-1], WIDTHS[0])

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        return self.output(self.hidden(frames))


def _log_mel_frames(count: int, seed: int) -> np.ndarray:
    """`count` log-mel-like inputs (count, 640) in dB, float64.

    A machine's sound: a spectral envelope falling from about 0 dB in the low
    bands to about -40 dB in the high ones, a few harmonic peaks of 10-20 dB,
    smooth variation across bands, and small frame-to-frame fluctuation
    over the five consecutive frames.
    """
    rng = np.random.default_rng(seed)
    band = np.arange(MELS) / (MELS - 1)
    envelope = rng.uniform(-5, 5, (count, 1)) - rng.uniform(30, 45, (count, 1)) * band
    centres, heights = rng.uniform(0.05, 0.7, (count, 4, 1)), rng.uniform(10, 20, (count, 4, 1))
    peaks = (heights * np.exp(-0.5 * ((band - centres) / 0.015) ** 2)).sum(axis=1)
    cells = np.linspace(0, 1, 17)
    ripple = np.stack([np.interp(band, cells, row) for row in rng.standard_normal((count, len(cells)))])
    spectrum = envelope + peaks + 3.0 * ripple
    frames = spectrum[:, None, :] + 1.5 * rng.standard_normal((count, FRAMES, MELS))
    return frames.reshape(count, FRAMES * MELS)


def _fit_output(layer: nn.Linear, codes: np.ndarray, targets: np.ndarray) -> None:
    """Ridge least squares from the codes to the inputs: the reconstruction a trained autoencoder learns."""
    design = np.hstack([codes, np.ones((len(codes), 1))])
    gram = design.T @ design + RIDGE * np.eye(design.shape[1])
    solution = np.linalg.solve(gram, design.T @ targets)
    with torch.no_grad():
        layer.weight.copy_(torch.from_numpy(solution[:-1].T.astype(np.float32)))
        layer.bias.copy_(torch.from_numpy(solution[-1].astype(np.float32)))


def model() -> nn.Module:
    net = AutoEncoder()
    zoo.seed_weights(net, np.random.default_rng(zoo.WEIGHT_SEED))
    frames = _log_mel_frames(STATS_SAMPLES, zoo.STATS_SEED)
    _fit_output(net.output, zoo.batch_norm_statistics(net, frames, net.hidden).numpy(), frames)
    return net.eval()


def example_inputs() -> tuple[torch.Tensor]:
    return (torch.zeros(INPUT_SHAPE),)


def samples(count: int, seed: int) -> np.ndarray:
    """`count` seeded log-mel-like inputs, shaped (count, *INPUT_SHAPE), float32."""
    return _log_mel_frames(count, seed).astype(np.float32).reshape(count, *INPUT_SHAPE)


def calibration_data() -> np.ndarray:
    """64 seeded log-mel-like samples shaped (N, 1, 640), float32."""
    return samples(CALIBRATION_SAMPLES, zoo.CALIBRATION_SEED)
