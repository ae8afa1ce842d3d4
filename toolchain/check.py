"""`kiln check`: run every built model's host program and compare it with the reference executor.

For each model folder under a build root (holding `quantized.kir`,
`planned.kir` and the linked program), seeded inputs — the calibration
samples when the model has them — are quantized, run through the program and
through the integer (or float) reference; the table says whether they agree
bit for bit, and gives the arena and weight bytes.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from toolchain import host
from toolchain.errors import KilnError
from toolchain.ir import load
from toolchain.ir.graph import Graph
from toolchain.runio import quantize_inputs

SAMPLES = 10


def model_calibration(build: Path, model_dir: Path | None) -> dict[str, np.ndarray]:
    """The samples the model was calibrated with: its quant.calibration files, else calibration_data()."""
    npz = build / "calibration.npz"
    if model_dir is not None and (model_dir / "model.toml").exists():
        from toolchain import config
        from toolchain.quantize.calibration import load_calibration

        cfg = config.load(model_dir / "model.toml")
        if cfg["quant"]["mode"] != "none":
            return load_calibration(load(build / "normalized.kir", "normalized"), cfg["quant"], model_dir, npz)
    return dict(np.load(npz)) if npz.exists() else {}


def seeded_inputs(graph: Graph, calibration: Path | dict[str, np.ndarray] | None, count: int = SAMPLES, seed: int = 0) -> list[list[np.ndarray]]:
    """`count` float samples: calibration samples (a dict, or an .npz path) when there are any, else seeded normal noise."""
    if isinstance(calibration, Path):
        calibration = dict(np.load(calibration)) if calibration.exists() else {}
    data = calibration or {}
    rng = np.random.default_rng(seed)
    samples = []
    for i in range(count):
        row = []
        for name in graph.inputs:
            shape = graph.tensors[name].shape
            arr = data.get(name)
            row.append(arr[i % len(arr)].reshape(shape) if arr is not None and len(arr) else rng.standard_normal(shape).astype(np.float32))
        samples.append(row)
    return samples


def reference_outputs(graph: Graph, samples: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
    from toolchain.reference.executor import run
    from toolchain.reference.int8 import INT8_IMPLS

    outs = []
    for s in samples:
        result = run(graph, dict(zip(graph.inputs, s)), table=INT8_IMPLS)
        outs.append([result[n] for n in graph.outputs])
    return outs


def check_model(build: Path, model_dir: Path | None = None) -> dict:
    name = build.name
    quantized, planned = load(build / "quantized.kir", "quantized"), load(build / "planned.kir", "planned")
    exe = build / name
    if not exe.exists():
        raise KilnError(f"{exe}: no host program (build it with `scons {name}`)")
    samples = quantize_inputs(quantized, seeded_inputs(quantized, model_calibration(build, model_dir)))
    got = host.run_executable(exe, planned, samples)
    want = reference_outputs(quantized, samples)
    exact = sum(all(np.array_equal(g, w) for g, w in zip(gs, ws)) for gs, ws in zip(got, want))
    weights = sum(t.nbytes for t in planned.tensors.values() if t.is_constant)
    return {"model": name, "samples": len(samples), "bit_exact": exact, "arena_bytes": int(planned.meta["arena_size"]), "weight_bytes": weights}


def check_all(root: Path, models: Path | None = None) -> list[dict]:
    """Check every model built under `root`; `models` is the folder of model folders, for their calibration files."""
    builds = sorted(p.parent for p in root.glob("*/planned.kir"))
    if not builds:
        raise KilnError(f"{root}: no built models (run scons first)")
    return [check_model(b, models / b.name if models else None) for b in builds]


def render(rows: list[dict]) -> str:
    width = max([len("model")] + [len(r["model"]) for r in rows])
    lines = [f"{'model':<{width}}  {'output check':<22} {'arena bytes':>12} {'weight bytes':>13}"]
    for r in rows:
        verdict = "bit-exact" if r["bit_exact"] == r["samples"] else "MISMATCH"
        verdict += " ({}/{})".format(r["bit_exact"], r["samples"])
        lines.append(f"{r['model']:<{width}}  {verdict:<22} {r['arena_bytes']:>12} {r['weight_bytes']:>13}")
    return "\n".join(lines)
