"""Calibration time: the float reference a batch of samples at a time (as the quantize stage runs it) against
one sample at a time, on 3-layer CNNs (conv-pool-conv-pool-conv-mean-dense), every tensor observed (minmax).

Batching removes the per-sample, per-node overhead of the reference; what
remains is the float64 arithmetic itself, so the gain is largest for small
layers and smallest where convolutions dominate.

    python bench/calibration.py [--samples 4000]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from kiln.ir.graph import Graph, Node, Tensor
from kiln.quantize.calibration import observe_ranges
from kiln.quantize.config import CONFIG
from kiln.quantize.observers import MinMaxObserver
from kiln.reference.executor import run

CONFIG_DEFAULTS = {k: v.default for k, v in CONFIG.items()}


MODELS = {"32x32x3, 16/32/32 channels": (32, 3, (16, 32, 32)), "16x16x1, 8/16/16 channels": (16, 1, (8, 16, 16))}


def cnn(size: int, channels: int, widths: tuple[int, int, int]) -> Graph:
    """conv, pool, conv, pool, conv, global pool, fully connected: NHWC kernel ops."""
    rng = np.random.default_rng(0)
    g = Graph("cnn3", inputs=["x"], outputs=["y"])
    g.add_tensor(Tensor("x", (1, size, size, channels), "float32"))
    shape, prev = (1, size, size, channels), "x"
    for i, (cin, cout) in enumerate(zip((channels, *widths[:2]), widths)):
        w = g.add_tensor(Tensor(f"w{i}", (cout, 3, 3, cin), "float32", data=(rng.standard_normal((cout, 3, 3, cin)) * 0.2).astype(np.float32)))
        out = g.add_tensor(Tensor(f"c{i}", (1, shape[1], shape[2], cout), "float32"))
        g.nodes.append(Node(f"conv{i}", "conv2d", [prev, w.name], [out.name], {"pads": [1, 1, 1, 1], "act_min": 0.0, "act_max": np.inf}))
        prev, shape = out.name, out.shape
        if i < 2:
            pooled = g.add_tensor(Tensor(f"p{i}", (1, shape[1] // 2, shape[2] // 2, cout), "float32"))
            g.nodes.append(Node(f"pool{i}", "max_pool2d", [prev], [pooled.name], {"window": [2, 2], "strides": [2, 2]}))
            prev, shape = pooled.name, pooled.shape
    last = widths[-1]
    g.add_tensor(Tensor("gap", (1, 1, 1, last), "float32"))
    g.add_tensor(Tensor("flat", (1, last), "float32"))
    g.add_tensor(Tensor("wf", (10, last), "float32", data=(rng.standard_normal((10, last)) * 0.2).astype(np.float32)))
    g.add_tensor(Tensor("y", (1, 10), "float32"))
    g.nodes += [Node("gap", "global_avg_pool", [prev], ["gap"]), Node("flat", "reshape", ["gap"], ["flat"], {"shape": [1, last]}),
                Node("fc", "fully_connected", ["flat", "wf"], ["y"])]
    return g


def one_by_one(graph: Graph, samples: np.ndarray) -> dict[str, tuple[float, float]]:
    observers = {n: MinMaxObserver() for n, t in graph.tensors.items() if t.data is None}
    for s in samples:
        values = run(graph, {"x": s}, keep=True)
        for name, obs in observers.items():
            obs.observe(values[name])
    return {n: o.range() for n, o in observers.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=4000)
    args = parser.parse_args()
    print("| model | samples | batched s | one by one s | speed-up | same ranges |")
    print("|---|---:|---:|---:|---:|---|")
    for label, (size, channels, widths) in MODELS.items():
        graph = cnn(size, channels, widths)
        samples = np.random.default_rng(1).uniform(0, 1, (args.samples, 1, size, size, channels)).astype(np.float32)
        names = [n for n, t in graph.tensors.items() if t.data is None]
        start = time.perf_counter()
        batched = observe_ranges(graph, {"x": samples}, names, dict(CONFIG_DEFAULTS, max_samples=0))
        mid = time.perf_counter()
        single = one_by_one(graph, samples)
        end = time.perf_counter()
        print(f"| {label} | {args.samples} | {mid - start:.2f} | {end - mid:.2f} | {(end - mid) / (mid - start):.1f}x | {batched == single} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
