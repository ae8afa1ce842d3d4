"""Compile time and memory at scale: long generated chains and the ONNX "light" models.

    python bench/scale.py                         # chains of 100/1,000/3,000 nodes and every light model
    python bench/scale.py --chains 1000,3000 --models vgg19,resnet50
    python bench/scale.py --json build/scale.json

A chain of N nodes is an ONNX graph of N/4 residual blocks
`clip(x + bn(conv(x)), -6, 6)` on an 8-channel 8x8 image (Conv,
BatchNormalization, Add, Clip: every block exercises batch-norm folding, the
NHWC layout passes, activation fusion and a residual add; the clip keeps
values bounded however long the chain), calibrated with one seeded sample. A
pass, a stage or an index that is quadratic in the graph shows as a
3000/1000 time ratio near 9 instead of 3.

The light models are the ones the `onnx` package ships for its backend tests
(onnx/backend/test/data/light): the real networks' graphs with every weight
replaced by a ConstantOfShape (one value repeated). They compile through every
stage with one seeded 224x224 sample for calibration.

Every stage runs in its own child process (as a build runs it), which loads
the stage's modules first and then times `run_stage` alone (the fastest of
`--repeat` runs for the chains, as `timeit` takes: the run least disturbed): the seconds are the stage's work, not
Python's start-up. The chains are measured in CPU seconds of the stage's
process, which other jobs on a shared machine barely move (wall seconds are
in the JSON too); the light models in wall seconds. The peak RSS
(`ru_maxrss`) is the whole process's, imports included; the bound shown
beside it is 3 x the model's float weight bytes + 300 MB.

JSON (`--json`): `chains` (per length: `stage_seconds`, `stage_cpu_seconds`,
`peak_rss_mb`), `ratio_3000_1000` (per stage, of CPU seconds; empty unless
both lengths ran) and `light_models` (per model: `model`, `ok`, `error`,
`stage_seconds`, `stage_cpu_seconds`, `peak_rss_mb`, `weight_mb`,
`rss_bound_mb`).
"""
from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from kiln.stages import STAGES  # noqa: E402

CHAINS = (100, 1000, 3000)
LIGHT = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet", "vgg19", "zfnet512")
CHANNELS, SIDE = 8, 8
STAGE_MODULES = ("kiln.frontends.onnx", "kiln.normalize", "kiln.quantize", "kiln.lower", "kiln.plan", "kiln.codegen")


def light_dir() -> Path:
    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def chain_model(nodes: int) -> onnx.ModelProto:
    """`nodes` ONNX nodes (a multiple of 4): residual blocks of Conv, BatchNormalization, Add and Clip."""
    rng = np.random.default_rng(0)
    graph_nodes, inits = [], []
    x = "x"
    for b in range(nodes // 4):
        w = rng.standard_normal((CHANNELS, CHANNELS, 3, 3)).astype(np.float32) * 0.1
        bn = [rng.uniform(0.5, 1.5, CHANNELS), rng.standard_normal(CHANNELS) * 0.1, rng.standard_normal(CHANNELS) * 0.1,
              rng.uniform(0.5, 1.5, CHANNELS)]
        inits.append(numpy_helper.from_array(w, f"w{b}"))
        for name, arr in zip(("scale", "bias", "mean", "var"), bn):
            inits.append(numpy_helper.from_array(arr.astype(np.float32), f"{name}{b}"))
        graph_nodes += [
            helper.make_node("Conv", [x, f"w{b}"], [f"c{b}"], name=f"conv{b}", pads=[1, 1, 1, 1]),
            helper.make_node("BatchNormalization", [f"c{b}", f"scale{b}", f"bias{b}", f"mean{b}", f"var{b}"], [f"n{b}"], name=f"bn{b}"),
            helper.make_node("Add", [x, f"n{b}"], [f"a{b}"], name=f"add{b}"),
            helper.make_node("Clip", [f"a{b}", "lo", "hi"], [f"y{b}"], name=f"clip{b}"),
        ]
        x = f"y{b}"
    inits += [numpy_helper.from_array(np.float32(-6.0), "lo"), numpy_helper.from_array(np.float32(6.0), "hi")]
    shape = [1, CHANNELS, SIDE, SIDE]
    graph = helper.make_graph(graph_nodes, f"chain{nodes}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def calibration(path: Path, shape: tuple[int, ...]) -> Path:
    np.save(path, np.random.default_rng(0).standard_normal((1, *shape)).astype(np.float32))
    return path


def run_stages(source: Path, calib: Path, out: Path, repeat: int = 1) -> dict[str, Any]:
    """Every stage of `source` in its own child process: seconds (the fastest of `repeat` runs) and peak RSS
    per stage, or the first error."""
    out.mkdir(parents=True, exist_ok=True)
    seconds, cpu, rss = {}, {}, {}
    for st in STAGES:
        proc = subprocess.run([sys.executable, __file__, "--child", st.name, str(source), str(calib), str(out), str(repeat)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            lines = (proc.stderr.strip() or f"exit status {proc.returncode}").splitlines()
            first = lines[-1] if "Traceback" in proc.stderr else " ".join(lines[:2]) if lines[0].endswith(":") else lines[0]
            return {"ok": False, "error": f"{st.name}: {first}",
                    "stage_seconds": seconds, "stage_cpu_seconds": cpu, "peak_rss_mb": rss}
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        seconds[st.name], cpu[st.name], rss[st.name] = row["seconds"], row["cpu_seconds"], row["peak_rss_mb"]
    return {"ok": True, "error": None, "stage_seconds": seconds, "stage_cpu_seconds": cpu, "peak_rss_mb": rss}


def child(stage: str, source: Path, calib: Path, out: Path, repeat: int) -> None:
    """One stage, timed after its modules are loaded; prints {seconds, cpu_seconds, peak_rss_mb} as JSON."""
    import importlib

    from kiln.cli import resolve_source
    from kiln.errors import KilnError
    from kiln.runner import run_stage

    for module in STAGE_MODULES:
        importlib.import_module(module)
    runs, cpu = [], []
    try:
        name, model_dir, cfg = resolve_source(source, None)
        cfg["quant"]["calibration"] = [str(calib)]
        for _ in range(repeat):
            start, start_cpu = time.perf_counter(), time.process_time()
            run_stage(stage, name, model_dir, cfg, out)
            runs.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
    except KilnError as exc:
        raise SystemExit(f"kiln: error: {exc}") from None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": round(min(runs), 3), "cpu_seconds": round(min(cpu), 3),
                      "peak_rss_mb": round(peak, 1)}))


def weight_mb(path: Path) -> float:
    """Float weight megabytes of a light model: its ConstantOfShape outputs and float initializers (not the shapes)."""
    model = onnx.load(str(path))
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in inferred.graph.value_info}
    total = sum(int(np.prod(shapes.get(n.output[0], [0]))) for n in model.graph.node if n.op_type == "ConstantOfShape")
    total += sum(int(np.prod(t.dims)) for t in model.graph.initializer if t.data_type == TensorProto.FLOAT)
    return total * 4 / 2**20


def chains_table(lengths: list[int], work: Path, repeat: int) -> tuple[dict[str, Any], dict[str, float]]:
    names = [st.name for st in STAGES]
    print("| chain nodes | " + " | ".join(f"{s} CPU s" for s in names) + " |")
    print("|---:|" + "---:|" * len(names))
    rows: dict[str, Any] = {}
    calib = calibration(work / "chain_calib.npy", (1, CHANNELS, SIDE, SIDE))
    for n in lengths:
        source = work / f"chain{n}.onnx"
        onnx.save(chain_model(n), source)
        row = run_stages(source, calib, work / f"chain{n}", repeat)
        if not row["ok"]:
            raise SystemExit(f"chain of {n} nodes: {row['error']}")
        rows[str(n)] = row
        print(f"| {n:,} | " + " | ".join(f"{row['stage_cpu_seconds'][s]:.2f}" for s in names) + " |", flush=True)
    ratio: dict[str, float] = {}
    if {1000, 3000} <= set(lengths):
        a, b = rows["1000"]["stage_cpu_seconds"], rows["3000"]["stage_cpu_seconds"]
        ratio = {s: round(b[s] / max(a[s], 1e-3), 2) for s in names}
        print("| 3000/1000 | " + " | ".join(f"{ratio[s]:.2f}x" for s in names) + " |")
    return rows, ratio


def light_table(models: list[str], work: Path, keep: bool) -> list[dict[str, Any]]:
    """Each light model through every stage; peak RSS against the bound 3 x float weights + 300 MB."""
    names = [st.name for st in STAGES]
    print("| model | weights MB (float) | " + " | ".join(f"{s} s" for s in names) + " | peak RSS MB (stage) | bound MB | ok |")
    print("|---|---:|" + "---:|" * len(names) + "---:|---:|---|")
    calib = calibration(work / "light_calib.npy", (1, 3, 224, 224))
    rows = []
    for m in models:
        source = light_dir() / f"light_{m}.onnx"
        weights = round(weight_mb(source), 1) if source.is_file() else None
        row = {"model": m, "weight_mb": weights, **run_stages(source, calib, work / m)}
        row["rss_bound_mb"] = round(3 * weights + 300, 1) if weights is not None else None
        rows.append(row)
        secs = [f"{row['stage_seconds'][s]:.2f}" if s in row["stage_seconds"] else "-" for s in names]
        stage, peak = max(row["peak_rss_mb"].items(), key=lambda kv: kv[1], default=("", 0.0))
        bound = "-" if weights is None else f"{row['rss_bound_mb']:,.0f}"
        print(f"| {m} | {'-' if weights is None else f'{weights:,.1f}'} | " + " | ".join(secs) + f" | {f'{peak:,.0f} ({stage})' if stage else '-'} | {bound} | "
              f"{'yes' if row['ok'] else row['error']} |", flush=True)
        if not keep:
            shutil.rmtree(work / m, ignore_errors=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--chains", default=",".join(map(str, CHAINS)), help="chain lengths in nodes (multiples of 4), comma-separated")
    p.add_argument("--models", default=",".join(LIGHT), help="light models (names without light_), comma-separated; '' for none")
    p.add_argument("--repeat", type=int, default=3, help="runs of each chain stage; the fastest counts (default 3)")
    p.add_argument("--json", type=Path, help="also write the results as JSON")
    p.add_argument("--work", type=Path, help="keep every model's artifacts in this folder (default: a temporary one, emptied as it goes)")
    p.add_argument("--child", nargs=5, metavar=("STAGE", "SOURCE", "CALIB", "OUT", "REPEAT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args.child[0], *map(Path, args.child[1:4]), int(args.child[4]))
        return 0
    chains = [int(n) for n in args.chains.split(",") if n]
    models = [m for m in args.models.split(",") if m]
    with tempfile.TemporaryDirectory(prefix="kiln-scale-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        rows, ratio = chains_table(chains, work, args.repeat) if chains else ({}, {})
        print()
        light = light_table(models, work, keep=args.work is not None) if models else []
    result = {"chains": rows, "ratio_3000_1000": ratio, "light_models": light}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
