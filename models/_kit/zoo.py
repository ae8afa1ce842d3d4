"""Seeded weights for the MLPerf Tiny zoo models: what a model.py of the zoo shares with the others.

No data set can be fetched, so the zoo's weights are seeded rather than
trained, the same way for every member: He-normal kernels and batch-norm
shifts near +1 (`seed_weights`), batch-norm running statistics measured in
float64 on seeded task-like inputs (`batch_norm_statistics`), and a readout
fitted to the features those inputs give (`fit_readout`). Everything random
comes from NumPy's seeded generator and the statistics are computed in
float64 before rounding to float32, so a model is the same on every CPU.

A model.py puts this folder on sys.path itself (so it also loads outside
Kiln, in tests and export scripts), imports `zoo`, and lists the file in its
model.toml `model.depends`: editing it re-runs the import stage of exactly
those models (docs/models.md).
"""
from __future__ import annotations

import functools
import itertools
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

# Seeds of the three random streams: weights, batch-norm statistics inputs, calibration inputs.
WEIGHT_SEED = 0
STATS_SEED = 1
CALIBRATION_SEED = 2
BN_SHIFT = 1.0
LOGIT_STD = 3.0
READOUT_RANK = 4


def smooth_noise(rng: np.random.Generator, lead: tuple[int, ...], size: int, cells: int) -> np.ndarray:
    """Unit noise on a coarse cells x cells grid, bilinearly interpolated to size x size."""
    pos = np.linspace(0, cells - 1, size)
    low = np.minimum(pos.astype(int), cells - 2)
    frac = pos - low
    up = np.zeros((size, cells))
    up[np.arange(size), low] = 1 - frac
    up[np.arange(size), low + 1] = frac
    return up @ rng.standard_normal((*lead, cells, cells)) @ up.T


def seed_weights(net: nn.Module, rng: np.random.Generator) -> None:
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
            elif isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
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


def batch_norm_statistics(net: nn.Module, samples: np.ndarray,
                          features: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """`features(samples)` in float64, with every batch norm of `net` accumulating its running statistics.

    `features` runs the part of `net` up to the readout. Float64 keeps the
    statistics, once rounded to float32, independent of the CPU's vector
    unit and thread count; `net` is float32 and in eval mode afterwards.
    """
    convs = [m for m in net.modules() if isinstance(m, nn.Conv2d)]
    net.double().eval()
    for m in net.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            m.reset_running_stats()
            m.momentum = None  # a cumulative average over the whole pass
            m.train()
    for conv in convs:
        conv.forward = functools.partial(_conv64, conv)
    try:
        with torch.no_grad():
            return features(torch.from_numpy(samples))
    finally:
        for conv in convs:
            del conv.forward
        net.float().eval()


def fit_readout(fc: nn.Linear, features: torch.Tensor, rng: np.random.Generator) -> None:
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


def seeded_classifier(net: nn.Module, stats_inputs: np.ndarray, features: Callable[[torch.Tensor], torch.Tensor],
                      readout: nn.Linear) -> nn.Module:
    """`net` with seeded weights, batch-norm statistics of `stats_inputs`, and a readout fitted to their features."""
    rng = np.random.default_rng(WEIGHT_SEED)
    seed_weights(net, rng)
    fit_readout(readout, batch_norm_statistics(net, stats_inputs, features), rng)
    return net.eval()
