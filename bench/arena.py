"""Memory benchmark: per model in models/, the planned arena against its lower bound, weights and code.

Every model is compiled from its model.toml into a temporary folder (or read
from `--build-root`, e.g. `build/host`, when built there already), then
re-planned from its lowered graph for two comparisons: the given node order
without in-place kernels (what a plain greedy-by-size planner gets), and
`plan.lz4 = true`. Code bytes are the `.text` of the generated model
object, compiled with `arm-none-eabi-gcc -Os -mcpu=cortex-m4 -mthumb` (or the
host `gcc -Os` when the cross compiler is missing; the row says which).

    python bench/arena.py [MODEL...] [--build-root DIR] [--json FILE]
    python bench/arena.py --budgets [MODEL...] [--json FILE]    # plan.budget targets (issue 19's table)
    python bench/arena.py --frontier MODEL           # arena bytes against recomputed MACs

`--budgets` plans each model with `io_in_arena = true` under the budgets in
BUDGETS: the layer-by-layer arena, whether the budget is met and with which
plan, the smallest arena Kiln reaches, the MACs recomputed, and the Cortex-M4
instructions per inference of the layer-by-layer and the budget plan under
QEMU (each output checked bit for bit against the integer reference).
vww_mobilenet takes its input as NHWC there (`normalize.input_layout`), so
the input is the image itself rather than a transposed copy.
"""
from __future__ import annotations

import argparse
import json
import os
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
from kiln.check import reference_outputs
from kiln.model_table import firmware_model
from kiln.plan import plan
from kiln.plan.budget import frontier
from kiln.target import cortex_m, qemu
from kiln.target.macs import graph_macs
from kiln.runner import run_stage
from kiln.stages import STAGES

ROOT = Path(__file__).resolve().parent.parent
CROSS = (["arm-none-eabi-gcc", "-Os", "-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"], "arm-none-eabi-size")
HOST = (["gcc", "-Os"], "size")


# model -> (budgets, config overrides)
BUDGETS = {"vww_mobilenet": ((40000, 30000), {"normalize": {"input_layout": "NHWC"}}),
           "kws_dscnn": ((10000,), {}), "ic_resnet8": ((36000,), {})}


TFLM_ARENA = """
import sys
import numpy as np
from tflite_micro.python.tflite_micro import runtime
interpreter = runtime.Interpreter.from_file(sys.argv[1], arena_size=1 << 24)
for i in range(int(sys.argv[2])):
    details = interpreter.get_input_details(i)
    interpreter.set_input(np.zeros(details["shape"], details["dtype"]), i)
interpreter.invoke()
interpreter.print_allocations()
"""


def tflm_memory(source: Path, inputs: int) -> dict[str, int]:
    """TFLite Micro's arena use for a .tflite file: `total` (arena_used) and `head` (tensor data), from the
    RecordingMicroAllocator's report (printed by the C++ runtime, so read from a child's stderr)."""
    proc = subprocess.run([sys.executable, "-c", TFLM_ARENA, str(source), str(inputs)], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"), timeout=600)
    found = {}
    for line in proc.stderr.splitlines():
        for key in ("total", "head"):
            prefix = f"[RecordingMicroAllocator] Arena allocation {key} "
            if line.startswith(prefix):
                found[key] = int(line[len(prefix):].split()[0])
    if proc.returncode != 0 or len(found) != 2:
        raise KilnError(f"{source}: TFLite Micro did not report its arena use: {proc.stderr.strip()[-500:]}")
    return found


def compile_model(model: str, out: Path, overrides: dict | None = None) -> None:
    cfg = model_config.load(ROOT / "models" / model / "model.toml")
    for table, values in (overrides or {}).items():
        cfg[table].update(values)
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


def smallest_arena(lowered, config: dict) -> int:
    """The smallest arena plan.budget reaches: what the error of an impossible budget reports."""
    try:
        return int(plan(lowered, dict(config, budget=1)).meta["arena_size"])
    except KilnError as exc:
        return int(re.search(r": arena (\d+) bytes exceeds", str(exc)).group(1))


def m4_instructions(plans: dict[str, object], quantized, out: Path) -> dict[str, int]:
    """Median Cortex-M4 instructions per inference of each plan, its outputs checked against the reference."""
    sources, models = [], []
    for name, planned in plans.items():
        for file, text in generate(planned, name, {"prefix": "", "weights_section": ""}).items():
            (out / file).write_bytes(text)
        sources.append(out / f"{name}.c")
        models.append(firmware_model(name, (out / f"{name}.h").read_text()))
    elf = cortex_m.build_firmware(sources, models, out / "budgets.elf")
    rng = __import__("numpy").random.default_rng(0)
    samples = [[rng.integers(-128, 128, quantized.tensors[n].shape).astype("int8") for n in quantized.inputs] for _ in range(3)]
    want = reference_outputs(quantized, samples)
    counts = {}
    for name, planned in plans.items():
        run = qemu.run_firmware(elf, planned, samples, model=name)
        if any((g[0] != w[0]).any() for g, w in zip(run.outputs, want)):
            raise KilnError(f"{name}: the Cortex-M4 outputs differ from the reference")
        counts[name] = sorted(run.instructions)[len(run.instructions) // 2]
    return counts


def budget_rows(tmp: Path, models: list[str]) -> list[dict]:
    """The budget table's rows for `models` (every model of BUDGETS when empty)."""
    unknown = [m for m in models if m not in BUDGETS]
    if unknown:
        raise KilnError(f"no budgets for {', '.join(unknown)} (models with budgets: {', '.join(BUDGETS)})")
    rows = []
    for model, (budgets, overrides) in BUDGETS.items():
        if models and model not in models:
            continue
        build = tmp / model
        build.mkdir()
        compile_model(model, build, overrides)
        cfg = model_config.load(ROOT / "models" / model / "model.toml")
        config = dict(cfg["plan"], io_in_arena=True)
        lowered, quantized = load(build / "lowered.kir"), load(build / "quantized.kir")
        layer = plan(lowered, config)
        smallest = smallest_arena(lowered, config)
        for budget in budgets:
            plans = {f"{model}_layers": layer}
            try:
                met = plan(lowered, dict(config, budget=budget))
                plans[f"{model}_budget"] = met
            except KilnError:
                met = None
            counts = m4_instructions(plans, quantized, build) if shutil.which(CROSS[0][0]) else {}
            meta = met.meta if met else {}
            rows.append({"model": model, "budget": budget, "layer_by_layer_bytes": int(layer.meta["arena_size"]),
                         "layer_by_layer_bound": int(layer.meta["lower_bound"]), "copied_bytes": int(meta.get("in_place_copied", 0)),
                         "met": met is not None, "arena_bytes": int(meta["arena_size"]) if met else None,
                         "smallest_bytes": smallest, "plan": plan_words(meta) if met else "-", "scratch": meta.get("scratch_level", "-"),
                         "extra_macs": int(meta.get("extra_macs", 0)), "macs": graph_macs(layer),
                         "m4_layers": counts.get(f"{model}_layers"), "m4_budget": counts.get(f"{model}_budget")})
    return rows


def plan_words(meta: dict) -> str:
    """The budget plan in a few words: the tiled run and grid, the layers run over their input."""
    words = []
    if "tiled_run" in meta:
        over = ", output over input" if meta.get("tile_output_over_input") else ""
        words.append(f"steps {meta['tiled_run'][0]}-{meta['tiled_run'][1] - 1} {meta['tile_grid'][0]}x{meta['tile_grid'][1]}{over}")
    if "in_place_steps" in meta:
        steps = meta["in_place_steps"]
        words.append(f"steps {steps[0]}-{steps[-1]} in place" if steps == list(range(steps[0], steps[-1] + 1))
                     else f"steps {', '.join(map(str, steps))} in place")
    return "; ".join(words) or "layer by layer"


def render_budgets(rows: list[dict]) -> str:
    lines = ["| model | budget B | layer by layer B (bound) | met | arena B | smallest B | plan | kernel scratch | extra MACs "
             "| bytes copied | M4 instr layer by layer | M4 instr budget plan |", "|---|---:|---:|---|---:|---:|---|---|---:|---:|---:|---:|"]
    for r in rows:
        extra = f"{r['extra_macs']:,} ({100 * r['extra_macs'] / r['macs']:.1f}%)" if r["met"] else "-"
        m4 = [f"{v:,}" if v else "-" for v in (r["m4_layers"], r["m4_budget"])]
        copied = f"{r['copied_bytes']:,}" if r["met"] else "-"
        lines.append(f"| {r['model']} | {r['budget']:,} | {r['layer_by_layer_bytes']:,} ({r['layer_by_layer_bound']:,}) | "
                     f"{'yes' if r['met'] else 'no'} | {format(r['arena_bytes'], ',') if r['met'] else '-'} | {r['smallest_bytes']:,} | "
                     f"{r['plan']} | {r['scratch']} | {extra} | {copied} | {m4[0]} | {m4[1]} |")
    return "\n".join(lines)


def render_frontier(model: str, build: Path) -> str:
    cfg = model_config.load(ROOT / "models" / model / "model.toml")
    lowered = load(build / "lowered.kir")
    lines = [f"{model}: arena bytes against extra MACs (io_in_arena = true)", f"{'arena':>8} {'extra MACs':>12} {'slow MACs':>10} {'copied':>8}  plan"]
    for size, extra, slow, copied, what in frontier(lowered, dict(cfg["plan"], io_in_arena=True)):
        lines.append(f"{size:>8} {extra:>12} {slow:>10} {copied:>8}  {what}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="model folders under models/ (default: all)")
    parser.add_argument("--build-root", type=Path, help="read built models from DIR/<model>/ instead of compiling")
    parser.add_argument("--json", type=Path, help="also write the rows as a JSON list to FILE")
    parser.add_argument("--budgets", action="store_true", help="the plan.budget table instead")
    parser.add_argument("--frontier", action="store_true", help="print each model's arena/MACs frontier instead")
    args = parser.parse_args(argv)
    if args.budgets:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                rows = budget_rows(Path(tmp), args.models)
            except KilnError as exc:
                print(f"arena: error: {exc}", file=sys.stderr)
                return 1
        print(render_budgets(rows))
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1) + "\n")
        return 0
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
                if args.frontier:
                    print(render_frontier(model, build))
                    continue
                rows.append(bench_model(model, build))
        if args.frontier:
            return 0
    except KilnError as exc:
        print(f"arena: error: {exc}", file=sys.stderr)
        return 1
    print(render(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
