"""Runs one stage on a model's build folder: what the SCons tool starts, and what `kiln stage` and `kiln compile` call.

    python -m kiln.runner NAME --model-dir DIR --build-dir DIR

Each adapter reads the stage's input artifacts, calls the stage's pure
function and returns the bytes of its outputs; `run_stage` writes them
atomically. The SCons tool starts this module rather than the `kiln` CLI, so
a stage's build signature holds no CLI code (`kiln/stages.py`).
"""
from __future__ import annotations

import argparse
import importlib
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from kiln import config as model_config
from kiln.atomic import write_atomic
from kiln.errors import ConfigError, KilnError, one_line_errors
from kiln.ir import serialize
from kiln.stages import Stage, depends_files, stage

@dataclass(frozen=True)
class StageRun:
    """What an adapter gets: the model, its config view, and its input artifacts' paths."""

    model: str
    model_dir: Path
    config: dict[str, Any]
    inputs: dict[str, Path]


def adapter(st: Stage) -> Callable[[StageRun], dict[str, bytes]]:
    module, func = st.adapter.split(":")
    return getattr(importlib.import_module(module), func)


def _graph(job: StageRun, artifact: str):
    """The input graph `artifact`, checked: a corrupt file, or one of another level, is refused in one line."""
    return serialize.load(job.inputs[artifact], level=_level(artifact))


def _kir(graph, artifact: str) -> list[bytes | memoryview]:
    return serialize.dump_chunks(graph, level=_level(artifact))  # written piece by piece, not joined first


def _level(artifact: str) -> str:
    """A .kir artifact's level is its name: `quantized.kir` holds a quantized graph."""
    return Path(artifact).stem


def run_import(job: StageRun) -> dict[str, bytes]:
    from kiln.frontends import import_model

    source = job.model_dir / job.config["model"]["source"]
    depends = depends_files(job.model_dir, job.config["model"], str(job.model_dir / "model.toml"))
    imported = import_model(source, job.model, job.config["inputs"], tuple(depends))
    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v, np.float32) for k, v in sorted(imported.calibration.items())})
    return {"imported.kir": _kir(imported.graph, "imported.kir"), "calibration.npz": buf.getvalue()}


def run_normalize(job: StageRun) -> dict[str, bytes]:
    from kiln.normalize import normalize

    return {"normalized.kir": _kir(normalize(_graph(job, "imported.kir"), job.config["normalize"]), "normalized.kir")}


def run_quantize(job: StageRun) -> dict[str, bytes]:
    from kiln.quantize import kept, quantize
    from kiln.quantize.calibration import load_calibration

    graph, config = _graph(job, "normalized.kir"), job.config["quant"]
    calibration = load_calibration(graph, config, job.model_dir, job.inputs["calibration.npz"])
    return {"quantized.kir": _kir(quantize(graph, config, calibration), "quantized.kir"),
            kept.ARTIFACT: kept.pack(graph, calibration, config)}


def run_lower(job: StageRun) -> dict[str, bytes]:
    from kiln.lower import lower

    return {"lowered.kir": _kir(lower(_graph(job, "quantized.kir"), job.config["kernels"]), "lowered.kir")}


def run_plan(job: StageRun) -> dict[str, bytes]:
    from kiln.plan import plan

    return {"planned.kir": _kir(plan(_graph(job, "lowered.kir"), job.config["plan"]), "planned.kir")}


def run_codegen(job: StageRun) -> dict[str, bytes | Iterable[bytes]]:
    from kiln.codegen import stream

    return stream(_graph(job, "planned.kir"), job.model, job.config["codegen"])  # the source is written as it is made


def run_stage(name: str, model: str, model_dir: Path, config: dict[str, dict[str, Any]], build_dir: Path) -> list[Path]:
    """Run one stage on the artifacts in `build_dir`; every output is written atomically."""
    st = stage(name)
    job = StageRun(model, model_dir, model_config.view(config, st.tables), {a: build_dir / a for a in st.consumes})
    for artifact, path in job.inputs.items():
        if not path.exists():
            raise KilnError(f"{path}: missing input of stage {name} (run the earlier stages first)")
    try:
        produced = adapter(st)(job)
    except ConfigError as exc:  # a model.toml value: name the file (`kiln compile` of a lone source has none)
        toml = model_dir / "model.toml"
        raise KilnError(f"{toml}: {exc}" if toml.is_file() else str(exc)) from None
    expected = st.outputs(model)
    if sorted(produced) != sorted(expected):
        raise RuntimeError(f"stage {name} produced {sorted(produced)}, registry says {expected}")
    paths = []
    for artifact in expected:
        write_atomic(build_dir / artifact, produced[artifact])
        paths.append(build_dir / artifact)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kiln.runner", description="Run one Kiln stage on a model's build folder.")
    parser.add_argument("name", help="the stage")
    parser.add_argument("--model-dir", type=Path, required=True, help="the model folder holding model.toml")
    parser.add_argument("--build-dir", type=Path, required=True, help="the model's build folder")
    args = parser.parse_args(argv)
    # The build runs stages of several models at once (`scons -j`): an error line says whose stage it is.
    return one_line_errors(lambda: run_stage(args.name, args.build_dir.name, args.model_dir,
                                             model_config.load(args.model_dir / "model.toml"), args.build_dir) and 0,
                           context=f"{args.name} {args.build_dir.name}")


if __name__ == "__main__":
    raise SystemExit(main())
