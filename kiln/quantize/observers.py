"""Observers: how calibration turns a tensor's observed values into a float range.

An observer sees one tensor's value for every calibration sample (in sample
order; `observe_batch` takes several samples stacked on a leading axis, with
the same result as taking them one by one) and returns the range (lo, hi) to
quantize it to. Histogram observers
(percentile, MSE) need two passes over the samples: the first finds the
min/max that fixes the histogram's bins, the second fills the histogram, so
their memory stays bounded however many samples there are. Everything here is
deterministic: no randomness, float64 accumulation in sample order.
"""
from __future__ import annotations

from typing import Any

import numpy as np

BINS = 2048
LEVELS = 255  # int8 steps between the ends of a range


class Observer:
    """Base: tracks the overall min/max (pass 0); subclasses refine `range()`."""

    passes = 1

    def __init__(self) -> None:
        self.lo = np.inf
        self.hi = -np.inf

    def observe(self, x: np.ndarray, pass_index: int = 0) -> None:
        if pass_index == 0 and x.size:
            self.lo = min(self.lo, float(np.min(x)))
            self.hi = max(self.hi, float(np.max(x)))

    def observe_batch(self, xs: np.ndarray, pass_index: int = 0) -> None:
        """Samples stacked on axis 0; min, max and histograms aggregate them all at once."""
        self.observe(xs, pass_index)

    @property
    def seen(self) -> bool:
        return self.lo <= self.hi

    def range(self) -> tuple[float, float]:
        if not self.seen:
            raise ValueError("observer saw no values")
        return self.lo, self.hi


class MinMaxObserver(Observer):
    """The smallest and largest value seen (TFLite's and PyTorch's default for activations)."""


class MovingAverageObserver(Observer):
    """Min and max as moving averages over calibration batches, like PyTorch's MovingAverageMinMaxObserver.

    PyTorch's observer sees one calibration batch per step; Kiln's samples
    come one at a time, so consecutive samples form batches of BATCH (the last
    may be shorter). Each batch moves the averages towards its own min and max
    by a weight, so rare outlier batches count less. The weight is the
    averaging constant `c`, except while fewer than 1/c batches have been
    seen: the k-th batch then weighs 1/k, an equal average, so the estimate
    never rests on the first batch alone.
    """

    BATCH = 32

    def __init__(self, averaging_constant: float) -> None:
        super().__init__()
        self.c = float(averaging_constant)
        self.batches = 0
        self.avg_lo = self.avg_hi = 0.0
        self.pending = 0
        self.batch_lo, self.batch_hi = np.inf, -np.inf

    def observe(self, x: np.ndarray, pass_index: int = 0) -> None:
        super().observe(x, pass_index)
        if not x.size:
            return
        self.batch_lo, self.batch_hi = min(self.batch_lo, float(np.min(x))), max(self.batch_hi, float(np.max(x)))
        self.pending += 1
        if self.pending == self.BATCH:
            self.batches, self.avg_lo, self.avg_hi = self._moved()
            self.pending = 0
            self.batch_lo, self.batch_hi = np.inf, -np.inf

    def _moved(self) -> tuple[int, float, float]:
        """(batches, lo, hi) once the batch being filled is taken in."""
        batches = self.batches + 1
        weight = max(self.c, 1.0 / batches)
        return batches, self.avg_lo + weight * (self.batch_lo - self.avg_lo), self.avg_hi + weight * (self.batch_hi - self.avg_hi)

    def observe_batch(self, xs: np.ndarray, pass_index: int = 0) -> None:
        for x in xs:
            self.observe(x, pass_index)

    def range(self) -> tuple[float, float]:
        super().range()
        _, lo, hi = self._moved() if self.pending else (self.batches, self.avg_lo, self.avg_hi)
        return lo, hi


class HistogramObserver(Observer):
    """Pass 0: min/max; pass 1: a histogram of BINS equal bins over [min, max]."""

    passes = 2

    def __init__(self) -> None:
        super().__init__()
        self.counts = np.zeros(BINS, np.float64)

    def observe(self, x: np.ndarray, pass_index: int = 0) -> None:
        super().observe(x, pass_index)
        if pass_index == 1 and x.size and self.hi > self.lo:
            self.counts += np.histogram(x, bins=BINS, range=(self.lo, self.hi))[0]

    @property
    def edges(self) -> np.ndarray:
        return np.linspace(self.lo, self.hi, BINS + 1)


class PercentileObserver(HistogramObserver):
    """Keeps the values between the (100 - p)th and the pth percentile, clipping rare outliers."""

    def __init__(self, percentile: float) -> None:
        super().__init__()
        self.p = float(percentile)

    def range(self) -> tuple[float, float]:
        lo, hi = super().range()
        if hi == lo or self.p >= 100.0:
            return lo, hi
        return self._quantile(1.0 - self.p / 100.0), self._quantile(self.p / 100.0)

    def _quantile(self, q: float) -> float:
        """The value below which a fraction q of the histogram lies (linear within a bin)."""
        cdf = np.cumsum(self.counts) / self.counts.sum()
        i = min(int(np.searchsorted(cdf, q)), BINS - 1)
        before = cdf[i - 1] if i else 0.0
        inside = cdf[i] - before
        frac = (q - before) / inside if inside > 0 else 0.0
        e = self.edges
        return float(e[i] + frac * (e[i + 1] - e[i]))


class MSEObserver(HistogramObserver):
    """The range [a, b] (containing 0) with the least expected squared int8 quantization error.

    Values inside [a, b] cost the rounding noise of a uniform quantizer,
    step² / 12 with step = (b - a) / 255, except exact zeros (ReLU outputs),
    which every range represents exactly; values outside cost their squared
    distance to the clipped end (integrated exactly over each histogram bin,
    taking values as uniform within a bin). The search scales the min and the
    max independently: a coarse geometric grid, then a fine linear one
    around the best coarse point.
    """

    COARSE = 2.0 ** (-np.arange(81) / 8.0)  # 1 down to 2^-10

    def __init__(self) -> None:
        super().__init__()
        self.zeros = 0.0

    def observe(self, x: np.ndarray, pass_index: int = 0) -> None:
        super().observe(x, pass_index)
        if pass_index == 1:
            self.zeros += float(np.count_nonzero(x == 0))

    def range(self) -> tuple[float, float]:
        lo, hi = super().range()
        if hi == lo:
            return lo, hi
        lo0, hi0 = min(lo, 0.0), max(hi, 0.0)
        t_lo, t_hi = self._search(lo0, hi0, self.COARSE, self.COARSE)
        fine_lo = np.linspace(t_lo / 2 ** 0.125, min(1.0, t_lo * 2 ** 0.125), 33)
        fine_hi = np.linspace(t_hi / 2 ** 0.125, min(1.0, t_hi * 2 ** 0.125), 33)
        t_lo, t_hi = self._search(lo0, hi0, fine_lo, fine_hi)
        return t_lo * lo0, t_hi * hi0

    def _search(self, lo0: float, hi0: float, scales_lo: np.ndarray, scales_hi: np.ndarray) -> tuple[float, float]:
        scales_lo = scales_lo if lo0 < 0 else np.ones(1)
        scales_hi = scales_hi if hi0 > 0 else np.ones(1)
        err = self.expected_error(scales_lo * lo0, scales_hi * hi0)
        i, j = np.unravel_index(int(np.argmin(err)), err.shape)
        return float(scales_lo[i]), float(scales_hi[j])

    def expected_error(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Expected total squared error over the histogram for every range [a[i], b[j]] (shape (len(a), len(b))).

        The terms separate: clipping below depends on a only, clipping above
        on b only, and the mass inside is mass_below(b) - mass_below(a).
        """
        e = self.edges
        left, right = e[:-1], e[1:]
        density = self.counts / (right - left)
        a, b = np.asarray(a, np.float64)[:, None], np.asarray(b, np.float64)[:, None]

        def mass_below(t: np.ndarray) -> np.ndarray:
            return (density * np.clip(np.minimum(right, t) - left, 0.0, None)).sum(axis=-1)

        above = (density * (np.clip(right - b, 0.0, None) ** 3 - np.clip(left - b, 0.0, None) ** 3)).sum(axis=-1) / 3.0
        below = (density * (np.clip(a - left, 0.0, None) ** 3 - np.clip(a - right, 0.0, None) ** 3)).sum(axis=-1) / 3.0
        inside = np.clip(mass_below(b)[None, :] - mass_below(a)[:, None] - self.zeros, 0.0, None)
        step = (b[:, 0][None, :] - a[:, 0][:, None]) / LEVELS
        return below[:, None] + above[None, :] + inside * step ** 2 / 12.0


def make_observer(config: dict[str, Any]) -> Observer:
    """The observer that the `quant` config table names."""
    kind = config["observer"]
    if kind == "minmax":
        return MinMaxObserver()
    if kind == "moving_average":
        return MovingAverageObserver(config["averaging_constant"])
    if kind == "percentile":
        return PercentileObserver(config["percentile"])
    if kind == "mse":
        return MSEObserver()
    raise ValueError(f"unknown observer {kind!r}")
