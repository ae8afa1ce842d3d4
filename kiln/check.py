"""`kiln check`: run every built model's host program and compare it with the reference executor.

For each model folder under a build root, the program must first be the one
the build linked from the folder's current graphs (`kiln/manifest.py`):
a model whose graphs changed since (a partial build such as `scons
MODEL-quantize`), or that has no program, is reported as out of date or not
built, never as a mismatch. Up-to-date
programs run on the calibration samples the build keeps (seeded noise when
it keeps none), quantized, and their outputs are compared bit for bit with
the integer reference on the same inputs.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from kiln import host
from kiln.errors import KilnError
from kiln.ir import load
from kiln.ir.graph import Graph
from kiln.manifest import changed_since
from kiln.quantize.kept import load_samples
from kiln.runio import quantize_inputs

SAMPLES = 10


def seeded_inputs(graph: Graph, samples: dict[str, np.ndarray] | None, count: int = SAMPLES, seed: int = 0) -> list[list[np.ndarray]]:
    """`count` float samples: `samples` (per input, (N, *shape)) in turn when there are any, else seeded normal noise."""
    data = samples or {}
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(count):
        row = []
        for name in graph.inputs:
            shape = graph.tensors[name].shape
            arr = data.get(name)
            row.append(arr[i % len(arr)].reshape(shape) if arr is not None and len(arr) else rng.standard_normal(shape).astype(np.float32))
        rows.append(row)
    return rows


def reference_outputs(graph: Graph, samples: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
    from kiln.reference.executor import run
    from kiln.reference.int8 import INT8_IMPLS

    outs = []
    for s in samples:
        result = run(graph, dict(zip(graph.inputs, s)), table=INT8_IMPLS)
        outs.append([result[n] for n in graph.outputs])
    return outs


def staleness(build: Path) -> str | None:
    """Why the program in `build` is not the one its current graphs make, or None when it is."""
    name = build.name
    program, record = build / name, build / f"{name}.manifest"
    if not program.is_file() or not record.is_file():
        return f"not built: no program (run `scons {name}`)"
    try:
        changed = changed_since(build, record.read_text())
    except (OSError, ValueError, AttributeError) as exc:
        raise KilnError(f"{record}: unreadable manifest ({exc})") from None
    if changed:
        return f"out of date: {', '.join(changed)} changed since the program was built (run `scons {name}`)"
    return None


def check_model(build: Path) -> dict:
    """One row of the check table for the model built in `build`."""
    name = build.name
    row = {"model": name, "samples": 0, "bit_exact": 0, "stale": staleness(build)}
    if row["stale"]:
        return row
    quantized, planned = load(build / "quantized.kir", "quantized"), load(build / "planned.kir", "planned")
    kept = load_samples(build)
    samples = quantize_inputs(quantized, seeded_inputs(quantized, kept.inputs))
    got = host.run_executable(build / name, planned, samples)
    want = reference_outputs(quantized, samples)
    exact = sum(all(np.array_equal(g, w) for g, w in zip(gs, ws)) for gs, ws in zip(got, want))
    weights = sum(t.nbytes for t in planned.tensors.values() if t.is_constant)
    return row | {"samples": len(samples), "bit_exact": exact, "arena_bytes": int(planned.meta["arena_size"]),
                  "weight_bytes": weights, "inputs": f"from {kept.source}" if kept.count else "seeded random inputs"}


def check_all(root: Path) -> list[dict]:
    """Check every model under `root` that the build has started (it holds an imported graph)."""
    builds = sorted(p.parent for p in root.glob("*/imported.kir"))
    if not builds:
        raise KilnError(f"{root}: no built models (run scons first)")
    return [check_model(b) for b in builds]


def passed(row: dict) -> bool:
    return not row["stale"] and row["bit_exact"] == row["samples"]


def render(rows: list[dict]) -> str:
    width = max([len("model")] + [len(r["model"]) for r in rows])
    lines = [f"{'model':<{width}}  {'output check':<22} {'arena bytes':>12} {'weight bytes':>13}  inputs"]
    for r in rows:
        if r["stale"]:
            lines.append(f"{r['model']:<{width}}  {r['stale'].split(':')[0].upper():<22} {'-':>12} {'-':>13}")
            continue
        verdict = "bit-exact" if passed(r) else "MISMATCH"
        verdict += " ({}/{})".format(r["bit_exact"], r["samples"])
        lines.append(f"{r['model']:<{width}}  {verdict:<22} {r['arena_bytes']:>12} {r['weight_bytes']:>13}  {r['inputs']}")
    lines += [f"{r['model']}: {r['stale']}" for r in rows if r["stale"]]
    return "\n".join(lines)
