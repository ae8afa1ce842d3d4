"""Cortex-M4 benchmark: instructions per inference and per MAC, flash and RAM, for every built model.

Runs each model's firmware image (`scons target=cortex-m4`) under QEMU
mps2-an386 on the seeded inputs `kiln check` uses; instruction counts are
exact (QEMU -icount shift=0, SysTick resolution of 40 instructions). The
outputs are checked against the integer reference as they go, so a number
never comes from a wrong program.

    python bench/cortex_m.py [BUILD_ROOT] [--layers] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

from kiln.check import reference_outputs, seeded_inputs
from kiln.quantize.kept import load_samples
from kiln.errors import KilnError
from kiln.ir import load
from kiln.runio import quantize_inputs
from kiln.target.macs import graph_macs, node_macs
from kiln.target.qemu import run_firmware
from kiln.target.size import size_report


def bench_model(build: Path, layers: bool) -> dict:
    """One model's row: instruction counts over the seeded samples, MACs, sizes, and the output check."""
    name = build.name
    quantized, planned = load(build / "quantized.kir"), load(build / "planned.kir")
    samples = quantize_inputs(quantized, seeded_inputs(quantized, load_samples(build).inputs))
    run = run_firmware(build / f"{name}.elf", planned, samples)
    want = reference_outputs(quantized, samples)
    exact = sum(all(np.array_equal(g, w) for g, w in zip(gs, ws)) for gs, ws in zip(run.outputs, want))
    macs = graph_macs(planned)
    per_inference = statistics.median(run.instructions)
    size = size_report(build / f"{name}.elf")
    row = {
        "model": name,
        "samples": len(samples),
        "bit_exact": exact,
        "instructions": int(per_inference),
        "instructions_min": min(run.instructions),
        "instructions_max": max(run.instructions),
        "macs": macs,
        "instructions_per_mac": round(per_inference / macs, 2) if macs else None,
        "flash_bytes": size.flash,
        "weight_bytes": size.weights,
        "ram_bytes": size.data + size.bss + run.stack_bytes,
        "arena_bytes": size.arena,
        "stack_bytes": run.stack_bytes,
    }
    if layers:  # a second run: the hook's own work would inflate the totals above
        first = [lc for lc in run_firmware(build / f"{name}.elf", planned, samples[:1], layers=True).layers]
        row["layers"] = [{"index": lc.index, "name": lc.name, "instructions": lc.instructions,
                          "macs": node_macs(planned, planned.nodes[lc.index])} for lc in first]
    return row


def render(rows: list[dict]) -> str:
    head = f"{'model':<16} {'check':>9} {'instr/inference':>16} {'MACs':>10} {'instr/MAC':>10} {'flash B':>9} {'RAM B':>8} {'weights B':>10} {'arena B':>8} {'stack B':>8}"
    lines = [head]
    for r in rows:
        check = "ok" if r["bit_exact"] == r["samples"] else f"BAD {r['samples'] - r['bit_exact']}/{r['samples']}"
        ipm = f"{r['instructions_per_mac']:.2f}" if r["instructions_per_mac"] is not None else "-"
        lines.append(f"{r['model']:<16} {check:>9} {r['instructions']:>16} {r['macs']:>10} {ipm:>10} {r['flash_bytes']:>9} "
                     f"{r['ram_bytes']:>8} {r['weight_bytes']:>10} {r['arena_bytes']:>8} {r['stack_bytes']:>8}")
        for layer in r.get("layers", []):
            per_mac = f"{layer['instructions'] / layer['macs']:.2f}" if layer["macs"] else "-"
            lines.append(f"  [{layer['index']:>3}] {layer['name'][:40]:<40} {layer['instructions']:>12} {layer['macs']:>10} {per_mac:>10}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Instructions per inference and per MAC, flash and RAM of each model on Cortex-M4 (QEMU).")
    p.add_argument("build_root", type=Path, nargs="?", default=Path("build/cortex-m4"))
    p.add_argument("--layers", action="store_true", help="also list each layer's instructions (first sample)")
    p.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = p.parse_args(argv)
    try:
        builds = sorted(e.parent for e in args.build_root.glob("*/*.elf") if e.stem == e.parent.name)
        if not builds:
            raise KilnError(f"{args.build_root}: no model images (run `scons target=cortex-m4` first)")
        rows = [bench_model(b, args.layers) for b in builds]
    except KilnError as exc:
        print(f"kiln: error: {exc}", file=sys.stderr)
        return 1
    print(render(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n")
    return 0 if all(r["bit_exact"] == r["samples"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
