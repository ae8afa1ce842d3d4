"""MLPerf Tiny keyword spotting reference model: DS-CNN on 49x10 MFCC features, 12 classes.

The layers are those of the MLPerf Tiny Keras reference (Hello Edge's DS-CNN
small): a 10x4 stride-2 convolution with 64 filters, four depthwise-separable
blocks, dropout, a 24x5 average pool, a 12-way dense layer and softmax. Keras
pads 'same' asymmetrically (the odd row goes below), so the stem pads
explicitly. No data set can be fetched, so the weights are seeded rather than
trained: He-normal kernels, batch-norm running statistics measured on
seeded MFCC-like features, and a readout scaled so the logits spread as a
trained classifier's do.

Everything random comes from NumPy's seeded generator and the statistics are
computed in float64 before rounding to float32, so the model is the same on
every CPU. Inputs are (1, 1, 49, 10): batch, channel, time frames, MFCC
coefficients.
"""
from __future__ import annotations

import functools
import itertools

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

INPUT_SHAPE = (1, 1, 49, 10)
CLASSES = 12
FILTERS = 64
WEIGHT_SEED = 0
BN_SHIFT = 1.0
STATS_SEED = 1
STATS_SAMPLES = 64
LOGIT_STD = 3.0
READOUT_RANK = 4
CALIBRATION_SEED = 2
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


def _float64_features(net: DSCNN, samples: np.ndarray) -> torch.Tensor:
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
            return net.head[:3](net.blocks(net.stem(torch.from_numpy(samples))))
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
    net = DSCNN()
    rng = np.random.default_rng(WEIGHT_SEED)
    _seed_weights(net, rng)
    features = _float64_features(net, _mfcc(STATS_SAMPLES, STATS_SEED)[:, None])
    _fit_readout(net.head[3], features, rng)
    return net.eval()


def example_inputs() -> tuple[torch.Tensor]:
    return (torch.zeros(INPUT_SHAPE),)


def samples(count: int, seed: int) -> np.ndarray:
    """`count` seeded MFCC-like inputs, shaped (count, *INPUT_SHAPE), float32."""
    return _mfcc(count, seed).astype(np.float32).reshape(count, *INPUT_SHAPE)


def calibration_data() -> np.ndarray:
    """32 seeded MFCC-like samples shaped (N, 1, 1, 49, 10), float32."""
    return samples(CALIBRATION_SAMPLES, CALIBRATION_SEED)
