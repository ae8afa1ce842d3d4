"""The stage registry: the one place that says what each stage is.

For every stage: its name, the artifacts it reads and writes in the model's
build folder, the model.toml tables it reads, the source modules it is built
from, and the adapter that runs its pure function. The CLI (`kiln stage`,
`kiln compile`) and the SCons tool both read this table, so a stage's build
signature names exactly what affects its output.
"""
from __future__ import annotations

import importlib
import importlib.util
import io
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterable

import numpy as np

from toolchain.config import Key
from toolchain.errors import KilnError
from toolchain.ir import serialize

# Modules every stage is built from: the entry point SCons runs (`python -m toolchain`), the IR,
# errors, config views, this table, and every table's key declarations (a stage validates the
# whole model.toml). `tests/test_scons_matrix.py` checks a stage imports nothing outside its list.
COMMON_MODULES = ("toolchain/__init__.py", "toolchain/__main__.py", "toolchain/cli.py", "toolchain/errors.py",
                  "toolchain/config.py", "toolchain/stages.py", "toolchain/ir", "toolchain/frontends/config.py",
                  "toolchain/passes/config.py", "toolchain/quantize/config.py", "toolchain/lower/config.py",
                  "toolchain/plan/config.py", "toolchain/codegen/config.py")


@dataclass(frozen=True)
class StageRun:
    """What an adapter gets: the model, its config view, and its input artifacts' paths."""

    model: str
    model_dir: Path
    config: dict[str, Any]
    inputs: dict[str, Path]


@dataclass(frozen=True)
class Stage:
    name: str
    consumes: tuple[str, ...]
    produces: tuple[str, ...]  # "{model}" is replaced by the model name
    tables: tuple[str, ...]
    modules: tuple[str, ...]  # files or package folders, relative to the repository root
    adapter: str  # "module:function" taking a StageRun, returning {artifact: bytes}

    def outputs(self, model: str) -> list[str]:
        return [p.format(model=model) for p in self.produces]

    def run(self, job: StageRun) -> dict[str, bytes]:
        module, func = self.adapter.split(":")
        fn: Callable[[StageRun], dict[str, bytes]] = getattr(importlib.import_module(module), func)
        return fn(job)

    def source_files(self, root: Path) -> list[Path]:
        """Every file whose content the stage's output depends on, sorted."""
        files: set[Path] = set()
        for rel in COMMON_MODULES + self.modules:
            p = root / rel
            if p.is_dir():
                files.update(f for f in p.rglob("*") if f.is_file() and f.suffix in (".py", ".j2", ".fbs") and "__pycache__" not in f.parts)
            elif p.is_file():
                files.add(p)
            else:
                raise KilnError(f"stage {self.name}: source module {rel} does not exist")
        return sorted(files)


STAGES: tuple[Stage, ...] = (
    Stage("import", (), ("imported.kir", "calibration.npz"), ("model", "inputs"),
          ("toolchain/frontends", "toolchain/reference", "toolchain/numerics", "toolchain/samples.py"), "toolchain.stages:run_import"),
    Stage("normalize", ("imported.kir",), ("normalized.kir",), ("normalize",),
          ("toolchain/passes", "toolchain/reference"), "toolchain.stages:run_normalize"),
    Stage("quantize", ("normalized.kir", "calibration.npz"), ("quantized.kir", "samples.npz"), ("quant",),
          ("toolchain/quantize", "toolchain/numerics", "toolchain/reference", "toolchain/samples.py"), "toolchain.stages:run_quantize"),
    Stage("lower", ("quantized.kir",), ("lowered.kir",), ("kernels",),
          ("toolchain/lower", "toolchain/numerics"), "toolchain.stages:run_lower"),
    Stage("plan", ("lowered.kir",), ("planned.kir",), ("plan", "codegen"),
          ("toolchain/plan", "toolchain/lz4.py"), "toolchain.stages:run_plan"),
    Stage("codegen", ("planned.kir",), ("{model}.c", "{model}.h"), ("codegen",),
          ("toolchain/codegen", "toolchain/lz4.py"), "toolchain.stages:run_codegen"),
)
BY_NAME = {s.name: s for s in STAGES}

# model.toml tables -> the module that declares their keys as `CONFIG: dict[str, Key]`.
_CONFIG_MODULES = {
    "model": "toolchain.frontends.config",
    "inputs": None,  # free-form: input name -> {shape, dtype}
    "normalize": "toolchain.passes.config",
    "quant": "toolchain.quantize.config",
    "kernels": "toolchain.lower.config",
    "plan": "toolchain.plan.config",
    "codegen": "toolchain.codegen.config",
}


def config_schema() -> dict[str, dict[str, Key]]:
    return {t: (_config_module(m).CONFIG if m else {}) for t, m in _CONFIG_MODULES.items()}


def _config_module(name: str) -> ModuleType:
    """A table's key declarations, loaded without running its stage package's `__init__`.

    Importing `toolchain.passes.config` the usual way would import the whole
    `toolchain.passes` package, so every stage process would run (and its
    build signature would have to include) every other stage's code.
    """
    if name in sys.modules:
        return sys.modules[name]
    path = Path(__file__).resolve().parent.parent / (name.replace(".", "/") + ".py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def stage(name: str) -> Stage:
    if name not in BY_NAME:
        raise KilnError(f"unknown stage {name!r} (stages: {', '.join(BY_NAME)})")
    return BY_NAME[name]


# -- adapters: artifact I/O around each stage's pure function ---------------
def _graph(job: StageRun, artifact: str):
    """The input graph `artifact`, checked: a corrupt file, or one of another level, is refused in one line."""
    return serialize.load(job.inputs[artifact], level=_level(artifact))


def _kir(graph, artifact: str) -> list[bytes | memoryview]:
    return serialize.dump_chunks(graph, level=_level(artifact))  # written piece by piece, not joined first


def _level(artifact: str) -> str:
    """A .kir artifact's level is its name: `quantized.kir` holds a quantized graph."""
    return Path(artifact).stem


def run_import(job: StageRun) -> dict[str, bytes]:
    from toolchain.frontends import import_model
    from toolchain.frontends.config import depends_files

    source = job.model_dir / job.config["model"]["source"]
    depends = depends_files(job.model_dir, job.config["model"], str(job.model_dir / "model.toml"))
    imported = import_model(source, job.model, job.config["inputs"], tuple(depends))
    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v, np.float32) for k, v in sorted(imported.calibration.items())})
    return {"imported.kir": _kir(imported.graph, "imported.kir"), "calibration.npz": buf.getvalue()}


def run_normalize(job: StageRun) -> dict[str, bytes]:
    from toolchain.passes import normalize

    return {"normalized.kir": _kir(normalize(_graph(job, "imported.kir"), job.config["normalize"]), "normalized.kir")}


def run_quantize(job: StageRun) -> dict[str, bytes]:
    from toolchain.quantize import kept, quantize
    from toolchain.quantize.calibration import load_calibration

    graph, config = _graph(job, "normalized.kir"), job.config["quant"]
    calibration = load_calibration(graph, config, job.model_dir, job.inputs["calibration.npz"])
    return {"quantized.kir": _kir(quantize(graph, config, calibration), "quantized.kir"),
            kept.ARTIFACT: kept.pack(graph, calibration, config)}


def run_lower(job: StageRun) -> dict[str, bytes]:
    from toolchain.lower import lower

    return {"lowered.kir": _kir(lower(_graph(job, "quantized.kir"), job.config["kernels"]), "lowered.kir")}


def run_plan(job: StageRun) -> dict[str, bytes]:
    from toolchain.plan import plan

    planned = plan(_graph(job, "lowered.kir"), job.config["plan"], lz4=job.config["codegen"]["lz4"])
    return {"planned.kir": _kir(planned, "planned.kir")}


def run_codegen(job: StageRun) -> dict[str, bytes | Iterable[bytes]]:
    from toolchain.codegen import stream

    return stream(_graph(job, "planned.kir"), job.model, job.config["codegen"])  # the source is written as it is made


def run_stage(name: str, model: str, model_dir: Path, config: dict[str, dict[str, Any]], build_dir: Path) -> list[Path]:
    """Run one stage on the artifacts in `build_dir`; every output is written atomically."""
    st = stage(name)
    job = StageRun(model, model_dir, {t: config[t] for t in st.tables}, {a: build_dir / a for a in st.consumes})
    for artifact, path in job.inputs.items():
        if not path.exists():
            raise KilnError(f"{path}: missing input of stage {name} (run the earlier stages first)")
    produced = st.run(job)
    expected = st.outputs(model)
    if sorted(produced) != sorted(expected):
        raise RuntimeError(f"stage {name} produced {sorted(produced)}, registry says {expected}")
    paths = []
    for artifact in expected:
        serialize.write_atomic(build_dir / artifact, produced[artifact])
        paths.append(build_dir / artifact)
    return paths
