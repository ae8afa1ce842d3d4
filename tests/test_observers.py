"""Observers on distributions with known answers, and the seeded calibration sample choice."""
from __future__ import annotations

import io
import math
import sys

import numpy as np
import pytest

from kiln.ir.graph import Graph, Node, Tensor
from kiln.quantize.calibration import PROGRESS_DELAY_S, Progress, observe_ranges, select
from kiln.quantize.config import CONFIG
from kiln.quantize.observers import (MinMaxObserver, MovingAverageObserver, MSEObserver, PercentileObserver,
                                          make_observer)

DEFAULTS = {k: v.default for k, v in CONFIG.items()}


def feed(obs, samples):
    for p in range(obs.passes):
        for s in samples:
            obs.observe(np.asarray(s), p)
    return obs.range()


def fake_quant_mse(x: np.ndarray, lo: float, hi: float) -> float:
    """Mean squared error of quantizing x to 256 levels spanning [lo, hi] (written independently of the observers)."""
    step = (hi - lo) / 255.0
    q = np.clip(np.round((x - lo) / step), 0, 255)
    return float(np.mean((x - (lo + q * step)) ** 2))


def test_minmax_is_exact_extremes():
    rng = np.random.default_rng(1)
    samples = [rng.uniform(-1, 1, 500) for _ in range(20)]
    samples[7][3] = -3.25
    samples[12][99] = 5.5
    assert feed(MinMaxObserver(), samples) == (-3.25, 5.5)


def batches(*extremes: tuple[float, float]) -> list[np.ndarray]:
    """One batch of MovingAverageObserver.BATCH samples per (lo, hi): its first sample holds both, the rest 0."""
    out = []
    for lo, hi in extremes:
        out += [np.array([lo, hi])] + [np.zeros(2)] * (MovingAverageObserver.BATCH - 1)
    return out


def test_moving_average_matches_closed_form():
    c = 0.1
    # batches 1..10 weigh 1/k (an equal average: hi (1 + 9 * 2) / 10 = 1.9), then 30 more each move it by c towards 2
    lo, hi = feed(MovingAverageObserver(c), batches((0.0, 1.0), *[(-1.0, 2.0)] * 39))
    assert hi == pytest.approx(2.0 - 0.1 * (1 - c) ** 30, rel=1e-12)
    assert lo == pytest.approx(-1.0 + 0.1 * (1 - c) ** 30, rel=1e-12)


def test_moving_average_damps_a_single_outlier_batch():
    lo, hi = feed(MovingAverageObserver(0.01), batches(*[(0.0, 1.0)] * 150, (0.0, 100.0), *[(0.0, 1.0)] * 5))
    assert lo == 0.0
    assert hi == pytest.approx(1.0 + 99.0 * 0.01 * 0.99 ** 5, rel=1e-12)


def test_moving_average_takes_a_last_short_batch_and_any_split():
    rng = np.random.default_rng(4)
    samples = rng.standard_normal((70, 5))
    one, whole = MovingAverageObserver(0.01), MovingAverageObserver(0.01)
    for s in samples:
        one.observe(s)
    whole.observe_batch(samples[:33])
    whole.observe_batch(samples[33:])
    first, second, third = (samples[i:i + 32] for i in (0, 32, 64))
    lo = (first.min() + second.min()) / 2
    lo += (third.min() - lo) / 3
    assert one.range() == whole.range() and one.range()[0] == pytest.approx(lo, rel=1e-12)


def test_percentile_of_uniform():
    rng = np.random.default_rng(2)
    lo, hi = feed(PercentileObserver(99.0), rng.uniform(0.0, 1.0, (100, 10_000)))
    assert lo == pytest.approx(0.01, abs=2e-3)
    assert hi == pytest.approx(0.99, abs=2e-3)


def test_percentile_of_normal():
    rng = np.random.default_rng(3)
    lo, hi = feed(PercentileObserver(99.9), rng.standard_normal((100, 10_000)))
    z = 3.090232  # standard normal 99.9th percentile
    assert hi == pytest.approx(z, abs=0.03)
    assert lo == pytest.approx(-z, abs=0.03)


def test_percentile_100_is_minmax():
    rng = np.random.default_rng(4)
    data = rng.standard_normal((10, 1000))
    assert feed(PercentileObserver(100.0), data) == (data.min(), data.max())


def brute_force_best(x: np.ndarray) -> float:
    """Least fake-quant error over a fine grid of ranges [a, b] containing 0."""
    lo, hi = min(x.min(), 0.0), max(x.max(), 0.0)
    ts = np.linspace(0.5, 1.0, 51)
    return min(fake_quant_mse(x, a * lo, b * hi) for a in (ts if lo < 0 else [1.0]) for b in ts)


def test_mse_on_normal_clips_tails_near_the_optimum():
    rng = np.random.default_rng(5)
    data = rng.standard_normal((30, 2000))
    lo, hi = feed(MSEObserver(), data)
    x = data.ravel()
    chosen = fake_quant_mse(x, lo, hi)
    assert chosen < fake_quant_mse(x, x.min(), x.max())
    assert chosen <= 1.02 * brute_force_best(x)
    assert 3.0 < hi < x.max() and x.min() < lo < -3.0


def test_mse_keeps_a_uniform_range():
    rng = np.random.default_rng(6)
    lo, hi = feed(MSEObserver(), rng.uniform(-1.0, 3.0, (50, 4000)))
    assert lo == pytest.approx(-1.0, abs=0.02)
    assert hi == pytest.approx(3.0, abs=0.05)


def test_mse_one_sided_keeps_zero():
    rng = np.random.default_rng(7)
    data = np.maximum(rng.standard_normal((30, 2000)), 0.0)
    lo, hi = feed(MSEObserver(), data)
    assert lo == 0.0
    assert fake_quant_mse(data.ravel(), lo, hi) <= 1.02 * brute_force_best(data.ravel())


def test_mse_with_a_far_outlier_matches_brute_force():
    # one clipped outlier at 40 costs more than the rounding noise of 30k values, so the best range keeps most of it
    rng = np.random.default_rng(8)
    data = rng.uniform(-1.0, 1.0, (10, 3000))
    data[3, 17] = 40.0
    lo, hi = feed(MSEObserver(), data)
    x = data.ravel()
    assert 20.0 < hi < 40.0
    assert fake_quant_mse(x, lo, hi) <= 1.02 * brute_force_best(x)


def test_constant_tensor_range():
    for obs in (MinMaxObserver(), MovingAverageObserver(0.01), PercentileObserver(99.0), MSEObserver()):
        assert feed(obs, [np.full(10, 2.5)] * 3) == (2.5, 2.5)


def test_make_observer_follows_config():
    kinds = {"minmax": MinMaxObserver, "moving_average": MovingAverageObserver, "percentile": PercentileObserver, "mse": MSEObserver}
    for name, cls in kinds.items():
        assert type(make_observer(dict(DEFAULTS, observer=name))) is cls


def identity_graph() -> Graph:
    g = Graph("id", inputs=["x"], outputs=["y"])
    g.add_tensor(Tensor("x", (1, 4), "float32"))
    g.add_tensor(Tensor("y", (1, 4), "float32"))
    g.nodes.append(Node("clamp", "clamp", ["x"], ["y"], {"act_min": -math.inf, "act_max": math.inf}))
    return g


def test_sample_choice_is_seeded():
    a = select(1000, 50, seed=3)
    assert np.array_equal(a, select(1000, 50, seed=3))
    assert not np.array_equal(a, select(1000, 50, seed=4))
    assert len(np.unique(a)) == 50 and np.all(np.diff(a) > 0)
    assert np.array_equal(select(40, 50, seed=3), np.arange(40))
    assert np.array_equal(select(400, 0, seed=3), np.arange(400))


def test_observed_ranges_deterministic_per_seed():
    rng = np.random.default_rng(9)
    samples = {"x": rng.standard_normal((300, 1, 4)).astype(np.float32)}
    graph = identity_graph()
    for observer in ("minmax", "moving_average", "percentile", "mse"):
        cfg = dict(DEFAULTS, observer=observer, max_samples=20, seed=1)
        first = observe_ranges(graph, samples, ["y"], cfg)
        assert first == observe_ranges(graph, samples, ["y"], cfg)
        assert first != observe_ranges(graph, samples, ["y"], dict(cfg, seed=2))
    used = samples["x"][select(300, 20, 1)]
    assert observe_ranges(graph, samples, ["x"], dict(DEFAULTS, max_samples=20, seed=1)) == {"x": (float(used.min()), float(used.max()))}


def test_progress_in_logs_is_a_line_per_tenth_naming_the_model(capsys, monkeypatch):
    samples = {"x": np.zeros((400, 1, 4), np.float32)}
    monkeypatch.delenv("KILN_PROGRESS", raising=False)
    observe_ranges(identity_graph(), samples, ["y"], dict(DEFAULTS, max_samples=0))
    assert capsys.readouterr().err == ""  # a short calibration says nothing
    monkeypatch.setenv("KILN_PROGRESS", "1")
    observe_ranges(identity_graph(), samples, ["y"], dict(DEFAULTS, max_samples=0, observer="mse"))
    lines = capsys.readouterr().err.splitlines()
    assert 1 <= len(lines) <= 10 and all(line.startswith("kiln: calibrating id:") for line in lines)
    assert lines[-1] == "kiln: calibrating id: pass 2/2, 400/400 samples (100%)"
    monkeypatch.setenv("KILN_PROGRESS", "0")
    observe_ranges(identity_graph(), samples, ["y"], DEFAULTS)
    assert capsys.readouterr().err == ""


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_redraws_one_line_after_the_delay(monkeypatch):
    monkeypatch.delenv("KILN_PROGRESS", raising=False)
    monkeypatch.setattr(sys, "stderr", _Terminal())
    now = [0.0]
    progress = Progress("kws", 4000, 1, clock=lambda: now[0])
    progress.update(0, 100)
    assert sys.stderr.getvalue() == ""  # not yet PROGRESS_DELAY_S
    now[0] = PROGRESS_DELAY_S
    for done in (2000, 4000):
        progress.update(0, done)
    progress.close()
    assert sys.stderr.getvalue() == ("\rkiln: calibrating kws [###############...............] 2000/4000 samples"
                                     "\rkiln: calibrating kws [##############################] 4000/4000 samples\n")
