"""Memory benchmark: per model in models/, the planned arena against its lower bound, weights and code.

Every model is compiled from its model.toml into a temporary folder (or read
from `--build-root`, e.g. `build/host`, when built there already), then
re-planned from its lowered graph for two comparisons: the given node order
without in-place kernels (what a plain greedy-by-size planner gets), and
`plan.lz4 = true`. Code bytes are the `.text` of the generated model
object, compiled with `arm-none-eabi-gcc -Os -mcpu=cortex-m4 -mthumb` (or the
host `gcc -Os` when the cross compiler is missing; the row says which).

    python bench/arena.py [MODEL...] [--build-root DIR] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from kiln import config as model_config
from kiln.codegen import generate
from kiln.errors import KilnError
from kiln.host import RUNTIME, STRICT_FLAGS
from kiln.ir import load
from kiln.plan import plan
from kiln.runner import run_stage
from kiln.stages import STAGES

ROOT = Path(__file__).resolve().parent.parent
CROSS = (["arm-none-eabi-gcc", "-Os", "-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"], "arm-none-eabi-size")
HOST = (["gcc", "-Os"], "size")


def compile_model(model: str, out: Path) -> None:
    cfg = model_config.load(ROOT / "models" / model / "model.toml")
    for st in STAGES:
        run_stage(st.name, model, ROOT / "models" / model, cfg, out)


def code_bytes(source: Path) -> tuple[int, str]:
    """The `.text` bytes of `source` compiled for Cortex-M4 (or the host), and the compiler used."""
    cc, size = CROSS if shutil.which(CROSS[0][0]) else HOST
    obj = source.with_suffix(".bench.o")
    proc = subprocess.run([*cc, *STRICT_FLAGS, f"-I{RUNTIME}", f"-I{source.parent}", "-c", str(source), "-o", str(obj)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise KilnError(f"{source}: compilation failed:\n{proc.stderr.strip()}")
    table = subprocess.run([size, "-A", str(obj)], capture_output=True, text=True, check=True).stdout
    obj.unlink()
    return sum(int(m.group(1)) for m in re.finditer(r"^\.text\S*\s+(\d+)", table, re.M)), cc[0]


def weight_bytes(header: str) -> int:
    return int(re.search(r"_WEIGHT_BYTES (\d+)u", header).group(1))


def bench_model(model: str, build: Path) -> dict:
    """One row: the shipped plan and code, then the given-order and LZ4 re-plans of the same lowered graph."""
    cfg = model_config.load(ROOT / "models" / model / "model.toml")
    planned, lowered = load(build / "planned.kir"), load(build / "lowered.kir")
    code, compiler = code_bytes(build / f"{model}.c")
    given = plan(lowered, dict(cfg["plan"], reorder=False, in_place=False))
    lz4_plan = plan(lowered, dict(cfg["plan"], lz4=True))
    lz4_files = generate(lz4_plan, model, cfg["codegen"])
    return {
        "model": model,
        "arena_bytes": int(planned.meta["arena_size"]),
        "lower_bound_bytes": int(planned.meta["lower_bound"]),
        "ratio": float(planned.meta["arena_ratio"]),
        "weight_bytes": weight_bytes((build / f"{model}.h").read_text()),
        "code_bytes": code,
        "compiler": compiler,
        "schedule": str(planned.meta["schedule"]),
        "placement": str(planned.meta["placement"]),
        "given_order_arena_bytes": int(given.meta["arena_size"]),
        "lz4_arena_bytes": int(lz4_plan.meta["arena_size"]),
        "lz4_weight_bytes": weight_bytes(lz4_files[f"{model}.h"].decode()),
    }


def render(rows: list[dict]) -> str:
    head = (f"{'model':<20} {'arena':>8} {'bound':>8} {'ratio':>6} {'weights':>8} {'code':>7} "
            f"{'given order':>11} {'lz4 arena':>9} {'lz4 weights':>11}  schedule / placement")
    lines = [head]
    for r in rows:
        lines.append(f"{r['model']:<20} {r['arena_bytes']:>8} {r['lower_bound_bytes']:>8} {r['ratio']:>6.3f} "
                     f"{r['weight_bytes']:>8} {r['code_bytes']:>7} {r['given_order_arena_bytes']:>11} "
                     f"{r['lz4_arena_bytes']:>9} {r['lz4_weight_bytes']:>11}  {r['schedule']} / {r['placement']}")
    compilers = sorted({r["compiler"] for r in rows})
    lines.append(f"bytes; code = .text of the model object ({', '.join(compilers)} -Os)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="model folders under models/ (default: all)")
    parser.add_argument("--build-root", type=Path, help="read built models from DIR/<model>/ instead of compiling")
    parser.add_argument("--json", type=Path, help="also write the rows as a JSON list to FILE")
    args = parser.parse_args(argv)
    known = sorted(p.parent.name for p in (ROOT / "models").glob("*/model.toml"))
    models = args.models or known
    try:
        unknown = [m for m in models if m not in known]
        if unknown:
            raise KilnError(f"unknown model(s) {', '.join(unknown)} (models: {', '.join(known)})")
        rows = []
        with tempfile.TemporaryDirectory() as tmp:
            for model in models:
                build = args.build_root / model if args.build_root else Path(tmp) / model
                if not args.build_root:
                    build.mkdir()
                    compile_model(model, build)
                rows.append(bench_model(model, build))
    except KilnError as exc:
        print(f"arena: error: {exc}", file=sys.stderr)
        return 1
    print(render(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
