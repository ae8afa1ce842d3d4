"""The stage registry: the one place that says what each stage is, and all the build needs to know of it.

For every stage: its name, the artifacts it reads and writes in the model's
build folder, the model.toml tables it reads (each table is declared by the
`config.py` of the stage that owns it), the source modules it is built from,
the files of the model folder it reads, and the adapter (`kiln/runner.py`)
that runs its pure function. The CLI (`kiln stage`, `kiln compile`), the
stage runner and the SCons tool all read this table, so a stage's build
signature names exactly what affects its output. The C symbol prefix rule
and what a firmware's model table needs (`kiln/model_table.py`) are here too.

This module, and every module it or the SCons tool imports from Kiln
(`config`, `errors`, `names`, `paths`, `manifest`, `buildcache`, `remotecache`, `atomic`, `progress`,
`model_table`, `target/targets`, the worker client `worker` and the stages' `config.py`), uses the standard library and
relative imports only: the SCons tool loads them under a private package name,
so the SCons process runs no compiler code, needs no third-party package, and
no module of a firmware repository's own `site_scons/` can stand in for them.
"""
from __future__ import annotations

import io
import json
import tokenize
from dataclasses import dataclass
from pathlib import Path

from .errors import KilnError, did_you_mean
from .names import c_identifier

PACKAGE = Path(__file__).resolve().parent
# What Kiln's build signatures are computed over: `kiln/...` paths relative to the folder holding the package.
SOURCE_SUFFIXES = (".py", ".j2", ".fbs")

# Modules every stage is built from: the stage runner SCons starts (`python -m kiln.runner`), the IR,
# errors, config views, this table, and every table's key declarations (a stage validates the whole
# model.toml). Not the CLI: no stage runs it. `tests/test_scons_matrix.py` checks that a stage imports
# nothing outside its list.
COMMON_MODULES = ("kiln/__init__.py", "kiln/runner.py", "kiln/errors.py", "kiln/atomic.py", "kiln/config.py",
                  "kiln/stages.py", "kiln/names.py", "kiln/ir", "kiln/frontends/config.py", "kiln/normalize/config.py",
                  "kiln/quantize/config.py", "kiln/lower/config.py", "kiln/plan/config.py", "kiln/codegen/config.py")

# A stage run by the build reports its progress (calibration) as lines on the file descriptor this environment
# variable names (`kiln/progress.py` reads them), instead of drawing its own line on stderr. How a stage reports is
# not part of what it computes: the variable is no part of any signature, and the artifacts are the same without it.
PROGRESS_FD_ENV = "KILN_PROGRESS_FD"

# model.toml tables -> the module (relative to the package) that declares their keys as `CONFIG: dict[str, Key]`;
# each table belongs to the stage that reads it ("inputs" is free-form: input name -> {shape, dtype}).
TABLES = {
    "model": "frontends/config.py",
    "inputs": None,
    "normalize": "normalize/config.py",
    "quant": "quantize/config.py",
    "kernels": "lower/config.py",
    "plan": "plan/config.py",
    "codegen": "codegen/config.py",
}


@dataclass(frozen=True)
class Stage:
    name: str
    consumes: tuple[str, ...]
    produces: tuple[str, ...]  # "{model}" is replaced by the model name
    tables: tuple[str, ...]  # the model.toml tables it reads: its own, and no other stage's
    modules: tuple[str, ...]  # files or package folders, relative to the folder holding the package
    adapter: str  # "module:function" taking a StageRun, returning {artifact: bytes}

    def outputs(self, model: str) -> list[str]:
        return [p.format(model=model) for p in self.produces]

    def source_files(self, root: Path = PACKAGE.parent) -> list[Path]:
        """Every file whose content the stage's output depends on, sorted."""
        files: set[Path] = set()
        for rel in COMMON_MODULES + self.modules:
            p = root / rel
            if p.is_dir():
                files.update(f for f in p.rglob("*") if f.is_file() and f.suffix in SOURCE_SUFFIXES and "__pycache__" not in f.parts)
            elif p.is_file():
                files.add(p)
            else:
                raise KilnError(f"stage {self.name}: source module {rel} does not exist")
        return sorted(files)


STAGES: tuple[Stage, ...] = (
    Stage("import", (), ("imported.kir", "calibration.npz"), ("model", "inputs"),
          ("kiln/frontends", "kiln/reference", "kiln/numerics", "kiln/samples.py"), "kiln.runner:run_import"),
    Stage("normalize", ("imported.kir",), ("normalized.kir",), ("normalize",),
          ("kiln/normalize", "kiln/reference"), "kiln.runner:run_normalize"),
    Stage("quantize", ("normalized.kir", "calibration.npz"), ("quantized.kir", "samples.npz"), ("quant",),
          ("kiln/quantize", "kiln/numerics", "kiln/reference", "kiln/samples.py"), "kiln.runner:run_quantize"),
    Stage("lower", ("quantized.kir",), ("lowered.kir",), ("kernels",),
          ("kiln/lower", "kiln/numerics"), "kiln.runner:run_lower"),
    Stage("plan", ("lowered.kir",), ("planned.kir",), ("plan",),
          ("kiln/plan", "kiln/lz4.py", "kiln/target/__init__.py", "kiln/target/macs.py"), "kiln.runner:run_plan"),
    Stage("codegen", ("planned.kir",), ("{model}.c", "{model}.h"), ("codegen",),
          ("kiln/codegen", "kiln/lz4.py"), "kiln.runner:run_codegen"),
)
BY_NAME = {s.name: s for s in STAGES}


def stage(name: str) -> Stage:
    if name not in BY_NAME:
        raise KilnError(f"unknown stage {name!r}{did_you_mean(name, BY_NAME)} (stages: {', '.join(BY_NAME)})")
    return BY_NAME[name]


def package_files(root: Path = PACKAGE.parent) -> list[Path]:
    """Every source file of the package: what a page describing the compiler's work (`kiln build-report`) depends on."""
    return sorted(f for f in (root / "kiln").rglob("*") if f.is_file() and f.suffix in SOURCE_SUFFIXES and "__pycache__" not in f.parts)


# -- what the build needs to know of a model folder ------------------------------------------
def model_files(name: str, folder: Path, config: dict, toml: Path) -> list[Path]:
    """The files of (and named by) a model folder that stage `name` reads, sorted; a missing one is a KilnError.

    import reads the folder's files (any may be imported by a model.py or be
    an ONNX file's external data), except model.toml (read through the config
    views) and the calibration files, and the `model.depends` files outside
    it; quantize reads the `quant.calibration` files.
    """
    if name == "quantize":
        return calibration_files(folder, config, toml)
    if name != "import":
        return []
    excluded = set(calibration_files(folder, config, toml))
    files = sorted(f for f in folder.rglob("*") if f.is_file() and f.name != "model.toml" and "__pycache__" not in f.parts
                   and f.resolve() not in excluded)
    source = config["model"]["source"]
    if folder / source not in files:
        close = did_you_mean(source, (f.relative_to(folder).as_posix() for f in files))
        raise KilnError(f"{toml}: model.source: {source} is not a file the build tracks in {folder.name}/ "
                        f"(missing, or inside a symlinked folder){close}")
    return sorted(set(files) | set(depends_files(folder, config["model"], str(toml))))


def comment_free(path: Path) -> bool:
    """Whether the import stage's signature takes file `path` by its tokens without comments (`python_tokens`)."""
    return path.suffix == ".py"


def python_tokens(data: bytes) -> bytes:
    """What a Python source of a model means to the import stage: its tokens, without comments, blank lines or spacing.

    A comment edit of a model.py leaves this unchanged, so the build runs no
    stage for it; docstrings and all code are tokens and count. The encoding
    declaration counts (it is the first token). A file that does not tokenize
    is taken by its bytes (import then reports it).
    """
    try:
        tokens = [(t.type, t.string) for t in tokenize.tokenize(io.BytesIO(data).readline)
                  if t.type not in (tokenize.COMMENT, tokenize.NL)]
    except (tokenize.TokenError, SyntaxError, UnicodeDecodeError, LookupError):
        return b"bytes\0" + data
    return b"tokens\0" + json.dumps(tokens, ensure_ascii=False).encode("utf-8", "surrogatepass")


def depends_files(folder: Path, model_table: dict, where: str) -> list[Path]:
    """The `model.depends` files of a model folder, resolved; a missing one is an error naming `where`."""
    files = []
    for rel in model_table["depends"]:
        path = (folder / rel).resolve()
        if not path.is_file():
            raise KilnError(f"{where}: model.depends: {rel} does not exist (relative to {folder.name}/){near(folder, rel)}")
        files.append(path)
    return sorted(set(files))


def calibration_files(folder: Path, config: dict, toml: Path) -> list[Path]:
    """The `quant.calibration` files, resolved; a missing one stops the build in one line (not SCons's "Source not found")."""
    files = []
    for rel in config["quant"]["calibration"]:
        path = (folder / rel).resolve()
        if not path.is_file():
            raise KilnError(f"{toml}: quant.calibration: {rel} does not exist (relative to {folder.name}/){near(folder, rel)}")
        files.append(path)
    return sorted(set(files))


def near(folder: Path, rel: str) -> str:
    """` (did you mean 'x'?)` naming the files beside where a missing file `rel` (relative to `folder`) would be."""
    parent = Path(rel).parent
    try:
        names = [(parent / f.name).as_posix() for f in (folder / parent).iterdir() if f.is_file()]
    except OSError:
        return ""
    return did_you_mean(Path(rel).as_posix(), names)


def symbol_prefix(model: str, codegen: dict) -> str:
    """The prefix of every C symbol and macro of a model: `codegen.prefix`, or the model name made an identifier."""
    return codegen["prefix"] or c_identifier(model)
