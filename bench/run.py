"""The benchmark table: for every model in models/, size, memory, compile time, Cortex-M4 speed and int8 accuracy.

Each model is compiled into a work folder (a temporary one unless `--work`),
every stage run as the build runs it — its own `python -P -m kiln.runner`
process — and timed by wall clock; with `--repeat N` each stage runs N times
in a row (it rewrites the same bytes) and the median counts. Then:

- parameters: the elements of the conv, depthwise and fully-connected
  weights and biases as compiled (batch norm folded in); MACs from
  `kiln.target.macs`;
- weight, code, arena and lower-bound bytes from `bench/arena.py` (the
  planned graph and the generated sources);
- Cortex-M4 instructions per inference (median over the seeded samples
  `kiln check` uses, outputs checked bit for bit) from a QEMU run of the
  model's firmware image, through `bench/cortex_m.py`;
- int8 output SQNR and top-1 agreement against the float graph, as
  `kiln report` measures them (the 16 calibration samples the build keeps);
- for a model whose model.py defines `test_data()` (digits_cnn): top-1
  accuracy of the float graph and of the generated C on that held-out split;
- for a quantized `.tflite` source (no float graph to compare with): whether
  the integer reference gives TFLite Micro's outputs on the same samples, and
  TFLM's memory beside Kiln's: TFLM's `arena_used` (its RecordingMicroAllocator
  total: tensor data, inputs and outputs included, plus the interpreter's
  persistent structures) and the tensor-data part of it alone, against Kiln's
  arena re-planned with `plan.io_in_arena` (inputs and outputs inside the
  arena, their bytes reusable once dead), so both sides count inputs and
  outputs the same way.

    python bench/run.py [MODEL...] [--repeat N] [--work DIR] [--json FILE] [--no-m4]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import arena
import cortex_m as m4_bench
from kiln import config as model_config, host
from kiln.check import seeded_inputs
from kiln.stages import STAGES, symbol_prefix
from kiln.errors import KilnError
from kiln.ir import load
from kiln.ir.graph import Graph
from kiln.plan import plan
from kiln.quantize.kept import load_samples, report_inputs
from kiln.quantize.report import report
from kiln.reference.executor import run
from kiln.reference.int8 import INT8_IMPLS
from kiln.runio import quantize_inputs
from kiln.model_table import firmware_model
from kiln.target.cortex_m import build_firmware
from kiln.target.macs import graph_macs
from kiln.frontends.torch_module import load_model_py

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
REPORT_SAMPLES = 16  # `kiln report`'s default
# Nothing is written into models/, not even bytecode caches of the model files the stages load.
sys.dont_write_bytecode = True
NO_BYTECODE = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")


def time_stages(model: str, build: Path, repeat: int) -> dict[str, float]:
    """Median wall-clock seconds of each stage, each run `repeat` times as its own `kiln stage` process."""
    seconds = {}
    for st in STAGES:
        cmd = [sys.executable, "-P", "-m", "kiln.runner", st.name, "--model-dir", str(MODELS / model), "--build-dir", str(build)]
        runs = []
        for _ in range(repeat):
            start = time.perf_counter()
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=NO_BYTECODE)
            runs.append(time.perf_counter() - start)
            if proc.returncode != 0:
                raise KilnError(f"{model}: stage {st.name} failed: {proc.stderr.strip()}")
        seconds[st.name] = round(statistics.median(runs), 3)
    return seconds


def parameters(graph: Graph) -> int:
    """Weight and bias elements of the MAC layers (conv, depthwise, fully connected)."""
    return sum(graph.tensors[i].size for n in graph.nodes if n.op in ("conv2d", "depthwise_conv2d", "fully_connected")
               for i in n.inputs[1:3] if i)


def accuracy(model: str, build: Path, source: str, prefix: str) -> dict[str, Any] | None:
    """Top-1 accuracy on the model's held-out split (model.py `test_data()`): float graph and generated C."""
    if not source.endswith(".py"):
        return None
    module = load_model_py(MODELS / model / source)
    if not hasattr(module, "test_data"):
        return None
    images, labels = module.test_data()
    normalized, quantized, planned = (load(build / f"{a}.kir") for a in ("normalized", "quantized", "planned"))
    shape = quantized.tensors[quantized.inputs[0]].shape
    feeds = [img.reshape(shape) for img in images]
    floats = [run(normalized, {normalized.inputs[0]: x})[normalized.outputs[0]] for x in feeds]
    exe = host.build_executable([build / f"{model}.c"], [prefix], build / "host_model")
    ints = host.run_executable(exe, planned, quantize_inputs(quantized, [[x] for x in feeds]))
    return {
        "samples": len(labels),
        "float": round(float(np.mean([int(np.argmax(f)) for f in floats] == labels)), 4),
        "int8_c": round(float(np.mean([int(np.argmax(o[0])) for o in ints] == labels)), 4),
    }


def sqnr(build: Path) -> tuple[float | None, float]:
    """Output SQNR in dB (None: bit-exact) and top-1 agreement of int8 against float, as `kiln report` gives them."""
    normalized, quantized = load(build / "normalized.kir"), load(build / "quantized.kir")
    rep = report(normalized, quantized, *report_inputs(normalized, load_samples(build), REPORT_SAMPLES))
    return rep["outputs"].get(quantized.outputs[0]), rep["top1_agreement"]


def tflm_exact(build: Path, source: Path) -> bool:
    """Whether the integer reference gives TFLM's outputs on the seeded samples `kiln check` uses."""
    from tflite_micro.python.tflite_micro import runtime

    quantized = load(build / "quantized.kir")
    rows = quantize_inputs(quantized, seeded_inputs(quantized, load_samples(build).inputs, count=REPORT_SAMPLES))
    interpreter = runtime.Interpreter.from_file(str(source), arena_size=1 << 24)
    for row in rows:
        mine = run(quantized, dict(zip(quantized.inputs, row)), table=INT8_IMPLS)
        for i, x in enumerate(row):
            interpreter.set_input(x, i)
        interpreter.invoke()
        if any(not np.array_equal(mine[name], interpreter.get_output(j)) for j, name in enumerate(quantized.outputs)):
            return False
    return True


def tflite_columns(model: str, build: Path, source: str) -> dict[str, Any]:
    """The TFLite Micro comparison of a quantized .tflite source (empty for other sources)."""
    quantized = load(build / "quantized.kir")
    if quantized.meta.get("quantized_source") != "tflite":
        return {}
    path = MODELS / model / source
    cfg = model_config.load(MODELS / model / "model.toml")
    with_io = plan(load(build / "lowered.kir"), dict(cfg["plan"], io_in_arena=True))
    tflm = arena.tflm_memory(path, len(quantized.inputs))
    return {"tflm_arena_used_bytes": tflm["total"], "tflm_tensor_bytes": tflm["head"], "kiln_arena_io_bytes": int(with_io.meta["arena_size"]),
            "tflm_exact": tflm_exact(build, path)}


def cortex_m4(model: str, build: Path, prefix: str) -> dict[str, Any]:
    """Instructions per inference and per MAC of the model's firmware image under QEMU."""
    build_firmware([build / f"{model}.c"], [firmware_model(prefix, (build / f"{model}.h").read_text())], build / f"{model}.elf")
    row = m4_bench.bench_model(build, layers=False)
    if row["bit_exact"] != row["samples"]:
        raise KilnError(f"{model}: Cortex-M4 outputs differ from the integer reference on "
                        f"{row['samples'] - row['bit_exact']} of {row['samples']} samples")
    return row


def bench_model(model: str, build: Path, repeat: int, m4: bool) -> dict[str, Any]:
    """One model's row (see the module docstring for what each number is)."""
    seconds = time_stages(model, build, repeat)
    cfg = model_config.load(MODELS / model / "model.toml")
    prefix = symbol_prefix(model, cfg["codegen"])
    planned = load(build / "planned.kir")
    memory = arena.bench_model(model, build)
    macs = graph_macs(planned)
    tflite = tflite_columns(model, build, cfg["model"]["source"])
    sqnr_db, top1 = sqnr(build) if not tflite else (None, None)
    m4_row = cortex_m4(model, build, prefix) if m4 else None
    return {
        "model": model,
        "params": parameters(load(build / "quantized.kir")),
        "macs": macs,
        "weight_bytes": memory["weight_bytes"],
        "code_bytes": memory["code_bytes"],
        "arena_bytes": memory["arena_bytes"],
        "lower_bound_bytes": memory["lower_bound_bytes"],
        "arena_ratio": memory["ratio"],
        "stage_seconds": seconds,
        "compile_seconds": round(sum(seconds.values()), 3),
        "m4_instructions": m4_row["instructions"] if m4_row else None,
        "m4_instructions_per_mac": m4_row["instructions_per_mac"] if m4_row else None,
        "m4_samples": m4_row["samples"] if m4_row else None,
        "sqnr_db": sqnr_db,
        "top1_agreement": top1,
        "accuracy": accuracy(model, build, cfg["model"]["source"], prefix),
        **tflite,
    }


def render(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table."""
    stages = [st.name for st in STAGES]
    head = (["model", "params", "MACs", "weights B", "code B", "arena B", "bound B", "arena/bound"]
            + [f"{s} s" for s in stages] + ["M4 instr/inference", "M4 instr/MAC", "int8 SQNR dB", "accuracy float / int8",
                                            "TFLM arena_used B", "TFLM tensors B", "Kiln arena, io inside B"])
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for r in rows:
        acc = r["accuracy"]
        cells = [r["model"], f"{r['params']:,}", f"{r['macs']:,}", f"{r['weight_bytes']:,}", f"{r['code_bytes']:,}",
                 f"{r['arena_bytes']:,}", f"{r['lower_bound_bytes']:,}", f"{r['arena_ratio']:.3f}"]
        cells += [f"{r['stage_seconds'][s]:.2f}" for s in stages]
        cells += [f"{r['m4_instructions']:,}" if r["m4_instructions"] is not None else "-",
                  f"{r['m4_instructions_per_mac']:.2f}" if r["m4_instructions_per_mac"] is not None else "-",
                  _accuracy_cell(r),
                  f"{100 * acc['float']:.1f}% / {100 * acc['int8_c']:.1f}%" if acc else "-"]
        cells += [f"{r[k]:,}" if k in r else "-" for k in ("tflm_arena_used_bytes", "tflm_tensor_bytes", "kiln_arena_io_bytes")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _accuracy_cell(r: dict[str, Any]) -> str:
    if "tflm_exact" in r:  # a quantized .tflite source: its own int8 runtime is the reference
        return "= TFLM" if r["tflm_exact"] else "differs from TFLM"
    return "exact" if r["sqnr_db"] is None else f"{r['sqnr_db']:.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="model folders under models/ (default: all)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each stage; the median counts (default 3)")
    parser.add_argument("--work", type=Path, help="compile into DIR/<model>/ and keep it (default: a temporary folder)")
    parser.add_argument("--json", type=Path, help="also write the rows as a JSON list to FILE")
    parser.add_argument("--no-m4", dest="m4", action="store_false", help="skip the Cortex-M4 firmware and QEMU run")
    args = parser.parse_args(argv)
    known = sorted(p.parent.name for p in MODELS.glob("*/model.toml"))
    models = args.models or known
    try:
        unknown = [m for m in models if m not in known]
        if unknown:
            raise KilnError(f"unknown model(s) {', '.join(unknown)} (models: {', '.join(known)})")
        if args.repeat < 1:
            raise KilnError(f"--repeat must be at least 1, got {args.repeat}")
        with tempfile.TemporaryDirectory() as tmp:
            work = args.work or Path(tmp)
            rows = []
            for model in models:
                (work / model).mkdir(parents=True, exist_ok=True)
                rows.append(bench_model(model, work / model, args.repeat, args.m4))
    except KilnError as exc:
        print(f"bench: error: {exc}", file=sys.stderr)
        return 1
    print(render(rows))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
