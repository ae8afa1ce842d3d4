"""The `kiln` command line. Every user error is one line on stderr and a non-zero exit."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from kiln import __version__, config as model_config
from kiln.errors import KilnError, missing_package, one_line_errors
from kiln.stages import STAGES


# What every model source needs (torch and tflite_micro are extras, needed only by their frontends).
CORE_PACKAGES = ("numpy", "onnx", "flatbuffers", "lz4", "jinja2")


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    return one_line_errors(lambda: args.func(args))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kiln", description="Compile neural-network models into int8 C code.")
    p.add_argument("--version", action="version", version=f"kiln {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("stage", help="run one stage on a model's build folder (what SCons runs, as python -m kiln.runner)")
    s.add_argument("name", choices=[st.name for st in STAGES])
    s.add_argument("--model-dir", type=Path, required=True, help="the model folder holding model.toml")
    s.add_argument("--build-dir", type=Path, required=True, help="the model's build folder")
    s.set_defaults(func=_cmd_stage)

    c = sub.add_parser("compile", help="run every stage on a model source, without SCons")
    c.add_argument("source", type=Path, help="a model folder, model.py, .pt2, .onnx or .tflite file")
    c.add_argument("--config", type=Path, help="model.toml (default: the one next to the source, if any)")
    c.add_argument("--calibration", type=Path, action="append", help="calibration samples (.npy/.npz): [N, *input_shape] or [N, *input_shape[1:]]")
    c.add_argument("-o", "--output", type=Path, required=True, help="output folder")
    c.add_argument("--name", help="the model's name: its generated files and C symbols (default: the source's name; "
                   "a model.* source or a folder takes the folder's name, as the build does)")
    c.set_defaults(func=_cmd_compile)

    x = sub.add_parser("plan", help="plans of a model under plan.budget: --explore prints the frontier of arena bytes "
                                    "against extra MACs")
    x.add_argument("source", type=Path, help="a model folder, model.py, .pt2, .onnx or .tflite file, or a lowered.kir")
    x.add_argument("--explore", action="store_true", required=True, help="print the candidate plans no other beats on both")
    x.add_argument("--config", type=Path, help="model.toml (default: the one next to the source, if any)")
    x.set_defaults(func=_cmd_plan)

    i = sub.add_parser("inspect", help="show a .kir file: tensors, ops, shapes, quantization, arena offsets")
    i.add_argument("file", type=Path)
    i.add_argument("--json", action="store_true", help="machine-readable output")
    i.set_defaults(func=_cmd_inspect)

    e = sub.add_parser("export", help="write an int8 stage (quantized.kir) as a .tflite file, for Netron or TFLite Micro")
    e.add_argument("file", type=Path, help="a quantized.kir (or a .kir of the same form)")
    e.add_argument("-o", "--output", type=Path, required=True, help="the .tflite file to write")
    e.set_defaults(func=_cmd_export)

    r = sub.add_parser("run", help="compile a `kiln compile` output folder for the host and run it")
    r.add_argument("outdir", type=Path)
    r.add_argument("--input", type=Path, required=True, help=".npy (one input) or .npz (by input name): one sample, [N, *shape] or [N, *shape[1:]]")
    r.add_argument("--output", type=Path, required=True, help=".npy (one output) or .npz")
    r.add_argument("--raw", action="store_true", help="read and write the int8 tensors instead of float")
    r.set_defaults(func=_cmd_run)

    q = sub.add_parser("report", help="accuracy of a compiled model: per-layer SQNR of int8 against float, top-1 agreement")
    q.add_argument("outdir", type=Path, help="a model's build folder or `kiln compile` output (normalized.kir, quantized.kir)")
    q.add_argument("--samples", type=int, help="how many of the calibration samples the build keeps to compare on (default: all)")
    q.add_argument("--json", type=Path, help="also write the report as JSON")
    q.set_defaults(func=_cmd_report)

    k = sub.add_parser("check", help="run every built model's program (host, or firmware under QEMU) in a build root "
                       "against the reference executor")
    k.add_argument("build_root", type=Path, nargs="?", default=Path("build/host"))
    k.add_argument("--layers", action="store_true", help="compare every layer's output with the reference and name the "
                   "first layer that differs, with each layer's SQNR against the float graph")
    k.set_defaults(func=_cmd_check)

    u = sub.add_parser("qemu", help="run a firmware image on its target's QEMU board: its stdout and stderr "
                       "(semihosting), then its exit status")
    u.add_argument("image", type=Path, help="an ELF image Kiln's SCons tool linked (KilnApp, KilnProgram)")
    u.add_argument("--timeout", type=float, default=60.0, help="seconds before the run is stopped (default 60)")
    u.set_defaults(func=_cmd_qemu)

    b = sub.add_parser("build-report", help="one self-contained HTML page of every model built under a build root")
    b.add_argument("build_root", type=Path, help="e.g. build/host or build/cortex-m4")
    b.add_argument("-o", "--output", type=Path, required=True, help="the HTML file to write")
    b.add_argument("--samples", type=int, help="how many of the calibration samples each build keeps to compare on (default: all)")
    b.add_argument("--cortex-m4", type=Path, action="append", metavar="ROOT",
                   help="a build root of Cortex-M4 images to take per-layer instructions from (repeatable; default: "
                        "the Cortex-M4 roots beside or inside BUILD_ROOT)")
    b.set_defaults(func=_cmd_build_report)

    d = sub.add_parser("doc", help="print a reference page that ships with Kiln (model-toml: every model.toml key)")
    d.add_argument("page", choices=["model-toml"])
    d.set_defaults(func=_cmd_doc)

    cut = sub.add_parser("extract", help="cut the layers between named tensors of a model source into a model folder of its own")
    cut.add_argument("source", type=Path, help="a model folder, model.py, .pt2, .onnx or .tflite file")
    cut.add_argument("--from", dest="starts", nargs="+", action="extend", required=True, metavar="TENSOR",
                   help="the tensors the cut starts from: its inputs (names as `kiln inspect imported.kir` shows them)")
    cut.add_argument("--to", dest="ends", nargs="+", action="extend", required=True, metavar="TENSOR", help="the tensors it computes: its outputs")
    cut.add_argument("--config", type=Path, help="model.toml (default: the one next to the source, if any)")
    cut.add_argument("-o", "--output", type=Path, required=True, help="the new model folder (its name is the model's)")
    cut.set_defaults(func=_cmd_extract)

    t = sub.add_parser("scons-tools", help="print the folder of Kiln's SCons tools (for toolpath=[...]); fails when this "
                       "Python lacks a package Kiln needs")
    t.set_defaults(func=_cmd_scons_tools)

    n = sub.add_parser("new", help="start a model folder: the source copied in and a commented model.toml")
    n.add_argument("name", help="the model's name (its folder under models/, its C symbol prefix)")
    n.add_argument("--from", dest="source", type=Path, required=True, help="a model.py, .onnx, .pt2 or .tflite file")
    n.add_argument("--models-dir", type=Path, default=Path("models"), help="where model folders live (default: models)")
    n.set_defaults(func=_cmd_new)
    return p


# -- commands --------------------------------------------------------------
def _cmd_stage(args: argparse.Namespace) -> int:
    from kiln.runner import run_stage

    model_dir = args.model_dir
    cfg = model_config.load(model_dir / "model.toml")
    run_stage(args.name, args.build_dir.name, model_dir, cfg, args.build_dir)
    return 0


def resolve_source(source: Path, config_path: Path | None, name: str | None = None) -> tuple[str, Path, dict[str, Any]]:
    """Model name, model folder and validated config for a `kiln compile` source.

    The name is `name` when given, else what the build calls the model: a folder, or a source named
    `model.*` (models/kws/model.onnx), takes the folder's name; any other file its own stem. It names
    files and C symbols, so it is checked as a model folder's name is.
    """
    if not source.exists():
        raise KilnError(f"{source}: no such file or folder")
    model_dir = source if source.is_dir() else source.parent
    where = "--name" if name is not None else str(source)
    if name is None:
        name = model_dir.resolve().name if source.is_dir() or source.stem == "model" else source.stem
    model_config.check_model_name(name, where)
    if source.is_dir():
        return name, model_dir, model_config.load(config_path or model_dir / "model.toml")
    if config_path is None and (model_dir / "model.toml").exists():
        config_path = model_dir / "model.toml"
    cfg = model_config.load(config_path) if config_path else model_config.validate({}, str(source))
    cfg["model"]["source"] = source.name
    return name, model_dir, cfg


def _cmd_compile(args: argparse.Namespace) -> int:
    from kiln.runner import run_stage

    name, model_dir, cfg = resolve_source(args.source, args.config, args.name)
    if args.calibration:
        cfg["quant"]["calibration"] = [str(p.resolve()) for p in args.calibration]
    args.output.mkdir(parents=True, exist_ok=True)
    for st in STAGES:
        run_stage(st.name, name, model_dir, cfg, args.output)
    print(f"kiln: compiled {name} into {args.output}", file=sys.stderr)
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    import tempfile

    from kiln.ir import load
    from kiln.plan.budget import frontier
    from kiln.runner import run_stage

    if args.source.suffix == ".kir":
        if not args.source.is_file():
            raise KilnError(f"{args.source}: no such file")
        name, lowered = args.source.stem, load(args.source, "lowered")
        cfg = model_config.load(args.config) if args.config else model_config.validate({}, str(args.source))
    else:
        name, model_dir, cfg = resolve_source(args.source, args.config)
        with tempfile.TemporaryDirectory() as tmp:
            for st in STAGES[: [s.name for s in STAGES].index("lower") + 1]:
                run_stage(st.name, name, model_dir, cfg, Path(tmp))
            lowered = load(Path(tmp) / "lowered.kir", "lowered")
    print(f"{name}: arena bytes against extra MACs (plan.io_in_arena = {str(bool(cfg['plan']['io_in_arena'])).lower()})")
    print(f"{'arena':>8} {'extra MACs':>12} {'slow MACs':>10} {'copied':>8}  plan")
    for size, extra, slow, copied, what in frontier(lowered, cfg["plan"]):
        print(f"{size:>8} {extra:>12} {slow:>10} {copied:>8}  {what}")
    return 0


def _cmd_inspect(args: argparse.Namespace) -> int:
    from kiln.inspect import describe, render

    from kiln.ir import load

    info = describe(load(args.file))
    print(json.dumps(info, indent=1, sort_keys=True) if args.json else render(info))
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from kiln.export.tflite import NotExportable, to_tflite
    from kiln.ir import load
    from kiln.atomic import write_atomic

    if args.output.suffix.lower() != ".tflite":
        raise KilnError(f"{args.output}: kiln export writes .tflite files")
    graph = load(args.file)
    try:
        exported = to_tflite(graph)
    except NotExportable as exc:
        raise KilnError(f"{args.file}: cannot be written as TFLite exactly: {exc}") from None
    write_atomic(args.output, exported.model)
    print(f"kiln: wrote {args.output} ({len(exported.model)} bytes)", file=sys.stderr)
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from kiln import host
    from kiln.ir import load
    from kiln.runio import check_values, dequantize_outputs, quantize_inputs, read_samples, write_samples

    planned = args.outdir / "planned.kir"
    graph = load(planned, "planned")
    source = args.outdir / f"{graph.name}.c"
    if not source.exists():
        raise KilnError(f"{args.outdir}: no generated C source {source.name} (run `kiln compile` first)")
    samples, form = read_samples(args.input, graph)
    check_values(args.input, graph, samples, args.raw)
    raw = samples if args.raw else quantize_inputs(graph, samples)
    exe = host.build_executable([source], [host.model_prefix(source.with_suffix(".h"))], args.outdir / "host_model")
    outs = host.run_executable(exe, graph, raw)
    write_samples(args.output, graph, outs if args.raw else dequantize_outputs(graph, outs), form)
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from kiln.ir import load
    from kiln.atomic import write_atomic
    from kiln.quantize.report import format_report, report, to_json
    from kiln.quantize.kept import load_samples, report_inputs

    if args.samples is not None and args.samples < 1:
        raise KilnError(f"--samples must be at least 1, got {args.samples}")
    normalized, quantized = load(args.outdir / "normalized.kir", "normalized"), load(args.outdir / "quantized.kir", "quantized")
    samples, described = report_inputs(normalized, load_samples(args.outdir), args.samples)
    rep = report(normalized, quantized, samples, described)
    print(format_report(rep))
    if args.json:
        write_atomic(args.json, to_json(rep).encode())
    return 0


def _cmd_build_report(args: argparse.Namespace) -> int:
    from kiln.atomic import write_atomic
    from kiln.report import build_report

    if args.samples is not None and args.samples < 1:
        raise KilnError(f"--samples must be at least 1, got {args.samples}")
    write_atomic(args.output, build_report(args.build_root, args.samples, args.cortex_m4).encode())
    return 0


def _cmd_new(args: argparse.Namespace) -> int:
    from kiln.scaffold import new_model

    folder = new_model(args.name, args.source, args.models_dir)
    print(f"kiln: created {folder} (edit its model.toml, then `scons {args.name}`)", file=sys.stderr)
    return 0


def _cmd_doc(args: argparse.Namespace) -> int:
    from kiln.model_toml_doc import render

    sys.stdout.write(render())
    return 0


def _cmd_extract(args: argparse.Namespace) -> int:
    from kiln.extract import extract

    name, model_dir, cfg = resolve_source(args.source, args.config)
    folder = extract(name, model_dir, cfg, args.source, args.starts, args.ends, args.output)
    print(f"kiln: wrote {folder} (compile it with `kiln compile {folder}`, or build it with scons)", file=sys.stderr)
    return 0


def _cmd_scons_tools(args: argparse.Namespace) -> int:
    import importlib.util

    from kiln import paths

    for name in CORE_PACKAGES:
        if importlib.util.find_spec(name) is None:
            raise KilnError(missing_package(ModuleNotFoundError(name=name)))
    print(paths.scons_tools())
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    from kiln.check import check_all, passed, render

    if args.layers:
        from kiln.check_layers import check_layers_all, layers_passed, render_layers

        checked = check_layers_all(args.build_root)
        print(render_layers(checked))
        return 0 if all(layers_passed(r) for r in checked) else 1
    rows = check_all(args.build_root)
    print(render(rows))
    return 0 if all(passed(r) for r in rows) else 1


def _cmd_qemu(args: argparse.Namespace) -> int:
    from kiln.target.qemu import run_elf

    if not args.timeout > 0:
        raise KilnError(f"--timeout must be a positive number of seconds, got {args.timeout:g}")
    run = run_elf(args.image, timeout=args.timeout)
    sys.stdout.buffer.write(run.stdout)
    sys.stdout.flush()
    noise = tuple(n for n in (run.fault, "qemu-system-" if run.timed_out else None) if n)  # and QEMU's note of the stop
    sys.stderr.write("".join(line for line in run.stderr.splitlines(keepends=True) if not line.startswith(noise)))
    if run.fault:
        raise KilnError(f"{args.image}: firmware fault (exit status {run.status}): {run.fault}")
    if run.timed_out:
        raise KilnError(f"{args.image}: no exit within {args.timeout:g} s (the firmware hung or ran too long; --timeout)")
    return run.status


if __name__ == "__main__":
    raise SystemExit(main())
