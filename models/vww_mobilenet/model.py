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

Everything random comes from NumPy's seeded generator and the statistics are
computed in float64 before rounding to float32, so the model is the same on
every CPU. Inputs are (1, 3, 96, 96) RGB in [0, 1], the reference's 1/255
scaling.
"""
from __future__ import annotations

import functools
import itertools

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

INPUT_SHAPE = (1, 3, 96, 96)
CLASSES = 2
STEM = 8
# (output channels, stride) of each depthwise-separable block.
BLOCKS = ((16, 1), (32, 2), (32, 1), (64, 2), (64, 1), (128, 2), (128, 1), (128, 1), (128, 1), (128, 1), (128, 1),
          (256, 2), (256, 1))
WEIGHT_SEED = 0
BN_SHIFT = 1.0
STATS_SEED = 1
STATS_SAMPLES = 24
LOGIT_STD = 3.0
READOUT_RANK = 4
CALIBRATION_SEED = 2
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
    shade = 0.12 * _smooth(rng, (count, 1), size, 4) + 0.05 * _smooth(rng, (count, 1), size, 16)
    cast = 0.04 * _smooth(rng, (count, 3), size, 3)
    cy, cx = rng.uniform(0.35, 0.65, (2, count, 1, 1))
    height, width = rng.uniform(0.25, 0.45, count)[:, None, None], rng.uniform(0.08, 0.15, count)[:, None, None]
    inside = ((yy - cy) / height) ** 2 + ((xx - cx) / width) ** 2
    figure = (1 / (1 + np.exp(8 * (inside - 1))))[:, None] * (rng.random(count) < 0.5)[:, None, None, None]
    colour = rng.uniform(0.1, 0.9, (count, 3, 1, 1))
    scene = light + shade + cast
    scene = scene * (1 - figure) + colour * figure + 0.01 * rng.standard_normal(scene.shape)
    return np.clip(scene, 0.0, 1.0)


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


def _float64_features(net: MobileNetV1, samples: np.ndarray) -> torch.Tensor:
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
            return net.head[:2](net.blocks(net.stem(torch.from_numpy(samples))))
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
    net = MobileNetV1()
    rng = np.random.default_rng(WEIGHT_SEED)
    _seed_weights(net, rng)
    features = _float64_features(net, _images(STATS_SAMPLES, STATS_SEED))
    _fit_readout(net.head[2], features, rng)
    return net.eval()


def example_inputs() -> tuple[torch.Tensor]:
    return (torch.zeros(INPUT_SHAPE),)


def samples(count: int, seed: int) -> np.ndarray:
    """`count` seeded image-like inputs, shaped (count, *INPUT_SHAPE), float32."""
    return _images(count, seed).astype(np.float32).reshape(count, *INPUT_SHAPE)


def calibration_data() -> np.ndarray:
    """16 seeded image-like samples shaped (N, 1, 3, 96, 96), float32 in [0, 1]."""
    return samples(CALIBRATION_SAMPLES, CALIBRATION_SEED)
