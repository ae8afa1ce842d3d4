"""`kiln check`: run every built model's program and compare it with the reference executor.

A build root is any folder the SCons tool declared models in: a host one
(each model's own host program) or a firmware target's (each model's ELF
image, run under that target's QEMU board). Which program and which target
come from what the build wrote, never from folder names: each model's
manifest and the root's record (`kiln/manifest.py`). For each model folder
under a build root, the program must first be the one
the build linked from the folder's current graphs:
a model whose graphs changed since (a partial build such as `scons
MODEL-quantize`), or that has no program, is reported as out of date or not
built, with the `scons` command that builds it (the model's alias, after the
arguments the root's record names), never as a mismatch. Up-to-date
programs run on the calibration samples the build keeps (seeded noise when
it keeps none), quantized, and their outputs are compared bit for bit with
the integer reference on the same inputs. On a firmware target, a model
whose image is missing because it cannot fit the board is reported as not
fitting (its budget, `kiln.target.size.budget`), before any QEMU run.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from kiln import host
from kiln.errors import KilnError
from kiln.ir import load
from kiln.ir.graph import Graph
from kiln.manifest import changed_since, read, read_root
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


def firmware_target(name: str):
    """The firmware target a manifest or root record names, or None for the host."""
    from kiln.target.targets import target

    return None if name == "host" else target(name)


def does_not_fit(build: Path, target) -> str | None:
    """Why a model's image is missing on `target`, when it is because the model cannot fit the board."""
    from kiln.model_table import firmware_model, model_sizes
    from kiln.target.size import budget

    name = build.name
    header, obj = build / f"{name}.h", build / f"{name}.o"
    if target is None or not header.is_file() or not obj.is_file():
        return None
    prefix = re.search(r"^#define (\w+)_ARENA_SIZE \d+u$", header.read_text(), re.M)
    if prefix is None:
        return None
    needs = firmware_model(prefix[1].lower(), header.read_text(), str(header))
    return budget(name, target, needs.arena_size, needs.io_bytes, model_sizes(header, obj)[1] or 0).problem(target)


def scons_command(build: Path) -> str:
    """The command that builds a model's own program in its build root: the root's `scons` arguments, its alias."""
    return " ".join(["scons", *read_root(build.parent)["scons_args"].split(), build.name])


def program_of(build: Path) -> tuple[Path, object] | None:
    """The program the manifest in `build` names and the target it was built for (None: no manifest)."""
    record = build / f"{build.name}.manifest"
    if not record.is_file():
        return None
    try:
        found = read(record.read_text())
        return build / found["program"], firmware_target(found["target"])
    except (OSError, ValueError, KilnError) as exc:
        raise KilnError(f"{record}: unreadable manifest ({exc}); rebuild it with `{scons_command(build)}`") from None


def staleness(build: Path) -> str | None:
    """Why the program in `build` is not the one its current graphs make, or None when it is."""
    built = program_of(build)
    if built is None or not built[0].is_file():
        too_big = does_not_fit(build, firmware_target(read_root(build.parent)["target"]))
        if too_big:
            return f"does not fit: {too_big}"
        return f"not built: no program (run `{scons_command(build)}`)"
    changed = changed_since(build, (build / f"{build.name}.manifest").read_text())
    if changed:
        return f"out of date: {', '.join(changed)} changed since the program was built (run `{scons_command(build)}`)"
    return None


def check_model(build: Path) -> dict:
    """One row of the check table for the model built in `build` (on a firmware target, its image under QEMU)."""
    name = build.name
    row = {"model": name, "samples": 0, "bit_exact": 0, "stale": staleness(build)}
    if row["stale"]:
        return row
    program, target = program_of(build)
    quantized, planned = load(build / "quantized.kir", "quantized"), load(build / "planned.kir", "planned")
    kept = load_samples(build)
    samples = quantize_inputs(quantized, seeded_inputs(quantized, kept.inputs))
    if target is None:
        got = host.run_executable(program, planned, samples)
    else:
        from kiln.target.qemu import run_firmware

        got = run_firmware(program, planned, samples, timeout=300).outputs
    want = reference_outputs(quantized, samples)
    exact = sum(all(np.array_equal(g, w) for g, w in zip(gs, ws)) for gs, ws in zip(got, want))
    weights = sum(t.nbytes for t in planned.tensors.values() if t.is_constant)
    return row | {"samples": len(samples), "bit_exact": exact, "arena_bytes": int(planned.meta["arena_size"]),
                  "weight_bytes": weights, "inputs": f"from {kept.source}" if kept.count else "seeded random inputs"}


def started_builds(root: Path) -> list[Path]:
    """The model folders under `root` that the build has started (each holds an imported graph)."""
    builds = sorted(p.parent for p in root.glob("*/imported.kir"))
    if not builds:
        raise KilnError(f"{root}: no built models (run scons first)")
    return builds


def check_all(root: Path) -> list[dict]:
    """Check every model under `root` that the build has started."""
    return [check_model(b) for b in started_builds(root)]


def passed(row: dict) -> bool:
    """A model passes when bit-exact, or when it cannot fit the target's board (nothing to run, said so)."""
    if row["stale"]:
        return row["stale"].startswith("does not fit:")
    return row["bit_exact"] == row["samples"]


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
