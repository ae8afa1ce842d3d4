"""Every firmware target: instructions per inference and per MAC, flash and RAM, for every zoo model that fits.

Runs each model's image of each target's build root (`scons target=NAME`,
into build/NAME/) under that target's QEMU board on the seeded samples `kiln
check` uses, checking every output against the integer reference as it goes,
so a number never comes from a wrong program. Instruction counts are exact
(QEMU -icount shift=0; to one tick of the target's counter, see
kiln/target/targets.py). A model without an image because it cannot fit the
board is listed with its budget's reason. A second run of the first sample
with the per-layer hook gives the instructions of the pointwise (1x1) and
fully connected layers apart. The closing lines check the issue's targets:
the M55 (Helium) against the M4 (DSP) per MAC on pointwise/FC layers and on
the whole of kws_dscnn, the M0 against the M3 per MAC.

    python bench/targets.py [BUILD_DIR] [--targets A,B] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

from kiln.check import does_not_fit, reference_outputs, seeded_inputs
from kiln.errors import KilnError
from kiln.ir import load
from kiln.quantize.kept import load_samples
from kiln.runio import quantize_inputs
from kiln.target.macs import graph_macs, node_macs
from kiln.target.qemu import run_firmware
from kiln.target.size import size_report
from kiln.target.targets import TARGETS

POINTWISE = ("kiln_conv2d_1x1_s8", "kiln_fully_connected_s8", "kiln_fully_connected_few_s8")


def bench_model(build: Path, target) -> dict:
    """One row: instructions over the seeded samples, MACs, sizes, the output check, the pointwise/FC layers' share."""
    name = build.name
    row: dict = {"target": target.name, "model": name}
    elf = build / f"{name}.elf"
    if not elf.is_file():
        row["missing"] = does_not_fit(build, target) or "not built"
        return row
    quantized, planned = load(build / "quantized.kir"), load(build / "planned.kir")
    samples = quantize_inputs(quantized, seeded_inputs(quantized, load_samples(build).inputs))
    run = run_firmware(elf, planned, samples, timeout=600)
    want = reference_outputs(quantized, samples)
    exact = sum(all(np.array_equal(g, w) for g, w in zip(gs, ws)) for gs, ws in zip(run.outputs, want))
    layers = run_firmware(elf, planned, samples[:1], layers=True, timeout=600).layers
    pw = [lc for lc in layers if planned.nodes[lc.index].attrs.get("kernel") in POINTWISE]
    macs, size = graph_macs(planned), size_report(elf)
    instructions = int(statistics.median(run.instructions))
    return row | {
        "samples": len(samples), "bit_exact": exact, "instructions": instructions, "macs": macs,
        "instructions_per_mac": instructions / macs if macs else None,
        "pointwise_instructions": sum(lc.instructions for lc in pw),
        "pointwise_macs": sum(node_macs(planned, planned.nodes[lc.index]) for lc in pw),
        "flash_bytes": size.flash, "ram_bytes": size.data + size.bss + run.stack_bytes, "stack_bytes": run.stack_bytes,
    }


def render(rows: list[dict]) -> str:
    head = (f"{'target':<11} {'model':<19} {'check':>9} {'instr/inference':>16} {'MACs':>11} {'instr/MAC':>9} "
            f"{'pw/FC instr/MAC':>15} {'flash B':>9} {'RAM B':>9}")
    lines = [head]
    for r in rows:
        if "missing" in r:
            lines.append(f"{r['target']:<11} {r['model']:<19} {'-':>9}  {r['missing']}")
            continue
        check = "ok" if r["bit_exact"] == r["samples"] else f"BAD {r['samples'] - r['bit_exact']}/{r['samples']}"
        ipm = f"{r['instructions_per_mac']:.2f}" if r["instructions_per_mac"] else "-"
        pw = f"{r['pointwise_instructions'] / r['pointwise_macs']:.2f}" if r["pointwise_macs"] else "-"
        lines.append(f"{r['target']:<11} {r['model']:<19} {check:>9} {r['instructions']:>16,} {r['macs']:>11,} {ipm:>9} "
                     f"{pw:>15} {r['flash_bytes']:>9,} {r['ram_bytes']:>9,}")
    return "\n".join(lines)


def per_mac(rows: list[dict], target: str, models: set[str], pointwise: bool = False) -> float | None:
    """Instructions per MAC of `target` over `models` (their pointwise/FC layers only, with `pointwise`)."""
    chosen = [r for r in rows if r["target"] == target and r["model"] in models and "missing" not in r]
    key = ("pointwise_instructions", "pointwise_macs") if pointwise else ("instructions", "macs")
    macs = sum(r[key[1]] for r in chosen)
    return sum(r[key[0]] for r in chosen) / macs if macs else None


def goals(rows: list[dict]) -> list[tuple[str, float | None, float]]:
    """(what, measured ratio, the issue's bound) for each of the issue's targets the rows can answer."""
    ran = {t: {r["model"] for r in rows if r["target"] == t and "missing" not in r} for t in TARGETS}
    both = ran["cortex-m55"] & ran["cortex-m4"]
    small = ran["cortex-m0"] & ran["cortex-m3"]
    found = []
    for what, a, b, models, pw, bound in (
            ("M55 / M4 instr per MAC, pointwise and FC layers", "cortex-m55", "cortex-m4", both, True, 0.5),
            ("M55 / M4 instr per MAC, kws_dscnn", "cortex-m55", "cortex-m4", both & {"kws_dscnn"}, False, 0.6),
            ("M0 / M3 instr per MAC", "cortex-m0", "cortex-m3", small, False, 2.0)):
        num, den = per_mac(rows, a, models, pw), per_mac(rows, b, models, pw)
        found.append((f"{what} ({len(models)} models)", num / den if num and den else None, bound))
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Instructions per inference and per MAC, flash and RAM, per target and model.")
    p.add_argument("build_dir", type=Path, nargs="?", default=Path("build"))
    p.add_argument("--targets", default=",".join(TARGETS), help="comma-separated targets (default: every one built)")
    p.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = p.parse_args(argv)
    try:
        names = [n for n in args.targets.split(",") if n]
        unknown = [n for n in names if n not in TARGETS]
        if unknown:
            raise KilnError(f"unknown target {unknown[0]!r} (targets: {', '.join(TARGETS)})")
        roots = [(TARGETS[n], args.build_dir / n) for n in names if (args.build_dir / n).is_dir()]
        if not roots:
            raise KilnError(f"{args.build_dir}: no target build folders (run `scons target=NAME` first)")
        rows = [bench_model(b.parent, t) for t, root in roots for b in sorted(root.glob("*/imported.kir"))]
    except KilnError as exc:
        print(f"kiln: error: {exc}", file=sys.stderr)
        return 1
    print(render(rows))
    for what, ratio, bound in goals(rows):
        verdict = "-" if ratio is None else f"{ratio:.2f} (target <= {bound}: {'met' if ratio <= bound else 'NOT met'})"
        print(f"{what}: {verdict}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n")
    return 0 if all(r.get("bit_exact") == r.get("samples") for r in rows if "missing" not in r) else 1


if __name__ == "__main__":
    sys.exit(main())
