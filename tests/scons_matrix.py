"""The mutation matrix: every kind of edit and the exact set of build actions it must cause.

Shared by `tests/test_scons_matrix.py` (which asserts every row) and
`bench/incremental.py` (which times every row and renders the table in
`docs/build.md`). Rows on the compiler's source modules and model.toml
tables are generated from the stage registry, so a stage, table or module
added later gets its rows without editing this file.

An action is one string: `kiln <stage> <model>`, `sources <list>` (a stage's list of its
source modules and their signatures, rewritten when one changes), `cc <object>`,
`link <program>`, `manifest <program>.manifest`, `table <model table .c>` or
`cache <target>` (retrieved from the build cache). Expected sets are derived from the registry and from
the layout of the host build (`SConstruct`), never from a build.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx
from onnx import numpy_helper

from conftest import ROOT, copy_repo
from onnx_models import small_cnn
from kiln.config import config_schema
from kiln.stages import COMMON_MODULES, STAGES

# The snapshot's models: tiny_cnn (model.py, the PyTorch route) and onnx_cnn (an ONNX file with free
# spatial dimensions bound in model.toml and calibration files): two frontends, and most rows stay
# fast because only tiny_cnn's import loads torch.
TORCH_MODEL, ONNX_MODEL = "tiny_cnn", "onnx_cnn"
HOST = "build/host"
STAGE_NAMES = tuple(s.name for s in STAGES)
CALIBRATION_FILE = "samples.npy"

_ACTION_PATTERNS = (
    (re.compile(r"^(?:\[\d+/\d+\] )?kiln (\w+) (\S+)$"), lambda m: f"kiln {m[1]} {m[2]}"),
    (re.compile(r"^model table (\S+)$"), lambda m: f"table {m[1]}"),
    (re.compile(r"^stage sources (\S+)$"), lambda m: f"sources {m[1]}"),
    (re.compile(r"^kiln linker script (\S+)$"), lambda m: f"script {m[1]}"),
    (re.compile(r"^manifest (\S+)$"), lambda m: f"manifest {m[1]}"),
    (re.compile(r"^Retrieved `(.+)' from cache$"), lambda m: f"cache {m[1]}"),
    (re.compile(r"^\S*(?:gcc|cc|clang)\s+-o\s(\S+)\s+-c\s"), lambda m: f"cc {m[1]}"),
    (re.compile(r"^\S*(?:gcc|cc|clang)\s+-o\s(\S+)\s"), lambda m: f"link {m[1]}"),
)


def parse_actions(log: str) -> tuple[set[str], list[str]]:
    """The actions a `scons -Q` log shows, and the lines that are neither actions nor SCons/Kiln messages."""
    actions: set[str] = set()
    unknown = []
    for line in (raw.strip() for raw in log.splitlines()):
        if not line or line.startswith(("scons: ", "kiln: ")):
            continue
        for pattern, name in _ACTION_PATTERNS:
            match = pattern.match(line)
            if match:
                actions.add(name(match))
                break
        else:
            unknown.append(line)
    return actions, unknown


def run_scons(repo: Path, *args: str, env: dict[str, str] | None = None, check: bool = True) -> tuple[set[str], str, int]:
    """Run `scons -Q` in `repo`; returns its actions, its log and its exit status."""
    proc = subprocess.run([sys.executable, "-m", "SCons", "-Q", *args], cwd=repo, capture_output=True, text=True, env=env,
                          timeout=900)  # a build that blocks (say, on a planted FIFO) fails instead of hanging the suite
    log = proc.stdout + proc.stderr
    if check and proc.returncode != 0:
        raise AssertionError(f"scons {' '.join(args)} failed ({proc.returncode}):\n{log}")
    actions, unknown = parse_actions(log)
    if unknown:
        raise AssertionError(f"unrecognized lines in the scons log: {unknown}\n{log}")
    return actions, log, proc.returncode


# -- the snapshot every row starts from ----------------------------------------------------
def make_snapshot(dest: Path, jobs: int = 2) -> Path:
    """A copy of the project with tiny_cnn and onnx_cnn, fully built."""
    repo = copy_repo(dest, (TORCH_MODEL,))
    add_onnx_model(repo / "models" / ONNX_MODEL)
    run_scons(repo, f"-j{jobs}")
    return repo


def shared_snapshot(tmp_path_factory: Any) -> Path:
    """The snapshot, built once per test session, also across pytest-xdist workers (a file lock)."""
    session = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        session = session.parent  # the workers' folders share their session's folder
    snapshot, done = session / "kiln-snapshot", session / "kiln-snapshot.done"
    with open(session / "kiln-snapshot.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(snapshot, ignore_errors=True)
            make_snapshot(snapshot)
            done.touch()
    return snapshot


def add_onnx_model(folder: Path, size: int = 16) -> None:
    """A small ONNX classifier whose input height and width are free, bound by `[inputs.x]`."""
    folder.mkdir(parents=True, exist_ok=True)
    model = small_cnn(17)
    del model.graph.value_info[:]
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[2].dim_param, dims[3].dim_param = "height", "width"
    onnx.save(model, folder / "model.onnx")
    toml = folder / "model.toml"
    toml.write_text("# A small ONNX classifier: conv-bn-relu, depthwise conv, pool, global pool, linear, softmax.\n"
                    '[model]\nsource = "model.onnx"\n')
    set_input_size(folder, size)
    set_key(toml, "quant", "calibration", [CALIBRATION_FILE])


def set_input_size(folder: Path, size: int, seed: int = 7) -> None:
    """Bind the ONNX model's input to size x size, with calibration samples of that shape."""
    set_key(folder / "model.toml", "inputs.x", "shape", [1, 3, size, size])
    np.save(folder / CALIBRATION_FILE, np.random.default_rng(seed).random((16, 1, 3, size, size), dtype=np.float32))


def scale_initializer(path: Path, name: str, factor: float) -> None:
    """Scale one weight tensor of an ONNX file."""
    model = onnx.load(path)
    init = next(t for t in model.graph.initializer if t.name == name)
    init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * np.float32(factor), name))
    onnx.save(model, path)


def clone_snapshot(snapshot: Path, dest: Path) -> Path:
    """A copy that SCons sees as up to date: same bytes, timestamps and `.sconsign` database."""
    shutil.copytree(snapshot, dest, symlinks=True, copy_function=shutil.copy2)
    return dest


def fresh_clone(snapshot: Path, dest: Path) -> Path:
    """The snapshot's sources only, as a new clone has them: nothing built, no `.sconsign`."""
    shutil.copytree(snapshot, dest, ignore=shutil.ignore_patterns("build", ".sconsign*", "__pycache__"))
    return dest


def build_files(repo: Path) -> dict[str, bytes]:
    """Every file under `repo/build`, by path relative to `repo`."""
    return {p.relative_to(repo).as_posix(): p.read_bytes() for p in sorted((repo / "build").rglob("*")) if p.is_file()}


# -- small, checked edits --------------------------------------------------------------------
def replace_once(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    if text.count(old) != 1:
        raise AssertionError(f"{path}: expected exactly one {old!r} to edit")
    path.write_text(text.replace(old, new))


def append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


def set_key(toml: Path, table: str, key: str, value: Any) -> None:
    """Set `table.key` in a model.toml (the value written as TOML), adding the table if needed."""
    lines = toml.read_text().splitlines()
    line = f"{key} = {json.dumps(value)}"
    header = lines.index(f"[{table}]") if f"[{table}]" in lines else None
    if header is None:
        lines += ["", f"[{table}]", line]
    else:
        end = next((i for i in range(header + 1, len(lines)) if lines[i].startswith("[")), len(lines))
        existing = [i for i in range(header + 1, end) if lines[i].split("=")[0].strip() == key]
        if existing:
            lines[existing[0]] = line
        else:
            lines.insert(header + 1, line)
    toml.write_text("\n".join(lines) + "\n")


def comment_line(path: Path) -> str:
    """A comment in the file's own language, so the edit changes its bytes and nothing it means."""
    if path.suffix == ".j2":
        return "{# an edit that renders nothing #}\n"
    if path.suffix in (".fbs", ".c", ".h"):
        return "// an edit that compiles to nothing\n"
    return "# an edit that runs nothing\n"


# -- what the host build is made of (the layout SConstruct declares) -----------------------
@dataclass(frozen=True)
class Build:
    """The snapshot's models, objects and programs, and which objects include which headers."""

    repo: Path

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(sorted(p.parent.name for p in (self.repo / "models").glob("*/model.toml")))

    def sources(self) -> dict[str, Path]:
        """Every object of the host build -> its C source."""
        out = {}
        for m in self.models:
            out[f"{HOST}/{m}/{m}.o"] = self.repo / HOST / m / f"{m}.c"
            out[f"{HOST}/{m}/{m}_models.o"] = self.repo / HOST / m / f"{m}_models.c"
        out[f"{HOST}/firmware_models.o"] = self.repo / HOST / "firmware_models.c"
        for c in self.shared_sources():
            out[f"{HOST}/_{c.parent.name}/{c.stem}.o"] = c
        return out

    def shared_sources(self) -> list[Path]:
        return sorted((self.repo / "runtime").glob("*.c")) + sorted((self.repo / "firmware_stubs").glob("*.c"))

    def programs(self) -> dict[str, set[str]]:
        """Every program -> the objects it links."""
        shared = {f"{HOST}/_{c.parent.name}/{c.stem}.o" for c in self.shared_sources()}
        out = {f"{HOST}/{m}/{m}": {f"{HOST}/{m}/{m}.o", f"{HOST}/{m}/{m}_models.o"} | shared for m in self.models}
        out[f"{HOST}/firmware"] = {f"{HOST}/{m}/{m}.o" for m in self.models} | {f"{HOST}/firmware_models.o"} | shared
        return out

    def includers(self, header: Path) -> set[str]:
        """The objects whose source includes `header`, directly or through other headers."""
        return {obj for obj, src in self.sources().items() if header.resolve() in self._includes(src, set())}

    def _includes(self, source: Path, seen: set[Path]) -> set[Path]:
        for name in re.findall(r'^\s*#\s*include\s+"([^"]+)"', source.read_text(), re.M):
            found = next((d / name for d in (source.parent, self.repo / "runtime") if (d / name).is_file()), None)
            if found and found.resolve() not in seen:
                seen.add(found.resolve())
                self._includes(found, seen)
        return seen


def stages(names: tuple[str, ...] | list[str], models: tuple[str, ...] | list[str]) -> set[str]:
    return {f"kiln {s} {m}" for s in names for m in models}


def source_lists(names: tuple[str, ...] | list[str]) -> set[str]:
    """The lists of source modules of stages `names` (one per stage and build root), rewritten when a module changes."""
    return {f"sources {HOST}/_kiln/{s}.sources" for s in names}


def from_stage(first: str, models: tuple[str, ...] | list[str]) -> set[str]:
    return stages(STAGE_NAMES[STAGE_NAMES.index(first):], models)


def readers(table: str, models: tuple[str, ...] | list[str]) -> set[str]:
    """The stages whose signature holds `table`: they rerun on any change to it (and may cut off)."""
    return stages([s.name for s in STAGES if table in s.tables], models)


def table_edit(table: str, changed_from: str, model: str) -> set[str]:
    """An edit of `table` in one model that changes the output of stage `changed_from` onward."""
    return readers(table, [model]) | from_stage(changed_from, [model])


def compiled(b: Build, objects: set[str], changed: bool) -> set[str]:
    """Recompiling `objects`; when their bytes change, every program linking one of them relinks."""
    links = {f"link {p}" for p, objs in b.programs().items() if objs & objects} if changed else set()
    return {f"cc {o}" for o in objects} | links


def manifests(models: set[str] | tuple[str, ...] | list[str]) -> set[str]:
    """Models whose generated C changed rewrite the manifest `kiln check` reads (the graphs change with it)."""
    return {f"manifest {HOST}/{m}/{m}.manifest" for m in models}


def model_output(b: Build, model: str) -> set[str]:
    """A model's generated C changed: its object recompiles, its program and the firmware relink."""
    return compiled(b, {f"{HOST}/{model}/{model}.o"}, changed=True) | manifests([model])


def new_model(b: Build, model: str) -> set[str]:
    """A model the build did not have before: all its stages, its program, a new firmware model table."""
    return (from_stage(STAGE_NAMES[0], [model])
            | {f"table {HOST}/{model}/{model}_models.c", f"table {HOST}/firmware_models.c"}
            | {f"cc {HOST}/{model}/{model}.o", f"cc {HOST}/{model}/{model}_models.o", f"cc {HOST}/firmware_models.o"}
            | {f"link {HOST}/{model}/{model}", f"link {HOST}/firmware"} | manifests([model]))


# -- rows ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    """One kind of edit: how to apply it to a built copy and the exact actions the next build runs."""

    id: str
    edit: str
    apply: Callable[[Path], None]
    expected: Callable[[Build], set[str]]
    error: str | None = None  # the build fails with this message (and runs exactly `expected`)


def own_file(stage: str, root: Path = ROOT) -> Path:
    """A source file only `stage` is built from: a comment in it reruns that stage alone."""
    files = {s.name: set(s.source_files(root)) for s in STAGES}
    own = sorted(files[stage].difference(*(files[o] for o in files if o != stage)))
    if not own:
        raise AssertionError(f"stage {stage}: no source file of its own, so nothing proves its cut-off")
    return own[0]


def source_module_rows(root: Path = ROOT) -> list[Row]:
    """From the registry: per stage a file only that stage is built from (its cut-off), per module
    shared by several stages one of its files, and one common module; each edited by a comment."""
    files = {s.name: set(s.source_files(root)) for s in STAGES}
    picks: dict[Path, str] = {}
    for s in STAGES:
        picks.setdefault(own_file(s.name, root), f"a comment in a source module only stage {s.name} is built from")
    shared = sorted({rel for s in STAGES for rel in s.modules if sum(rel in o.modules for o in STAGES) > 1})
    for rel in shared:
        picks.setdefault(_first_file(root / rel), "a comment in a source module several stages are built from")
    common = next(rel for rel in COMMON_MODULES if (root / rel).is_file() and rel.endswith("errors.py"))
    picks.setdefault(root / common, "a comment in a module every stage is built from")
    rows = []
    for path, edit in picks.items():
        rel = path.relative_to(root).as_posix()
        readers = tuple(s.name for s in STAGES if path in files[s.name])
        rows.append(Row(f"module:{rel}", f"{edit} (`{rel}`)",
                        lambda repo, rel=rel: append(repo / rel, comment_line(repo / rel)),
                        lambda b, readers=readers: stages(readers, b.models) | source_lists(readers)))
    return rows


def _first_file(folder: Path) -> Path:
    return folder if folder.is_file() else sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)[0]


def explicit_defaults(repo: Path) -> None:
    """Write every key of every table (except the free-form `inputs`) with its default value."""
    toml = repo / "models" / TORCH_MODEL / "model.toml"
    for table, keys in config_schema().items():
        for key in keys.values():
            set_key(toml, table, key.name, key.default)


# The model.toml edit per table that changes the output from the first stage reading it on
# (or, for `kernels`, the only way to change it: a profile the lower stage must reject).
TABLE_ROWS: dict[str, Row] = {
    "model": Row("table:model", "`[model] source`: the same model.onnx under another name (onnx_cnn)",
                 lambda repo: _rename_source(repo / "models" / ONNX_MODEL, "net.onnx"),
                 lambda b: readers("model", [ONNX_MODEL])),
    "inputs": Row("table:inputs", "an input shape: `[inputs.x] shape` from 16x16 to 12x12, with calibration samples "
                  "of that shape (onnx_cnn)",
                  lambda repo: set_input_size(repo / "models" / ONNX_MODEL, 12),
                  lambda b: table_edit("inputs", "import", ONNX_MODEL) | model_output(b, ONNX_MODEL)),
    "normalize": Row("table:normalize", '`[normalize] disable = ["fuse_activation"]` (tiny_cnn)',
                     lambda repo: set_key(repo / "models/tiny_cnn/model.toml", "normalize", "disable", ["fuse_activation"]),
                     lambda b: table_edit("normalize", "normalize", TORCH_MODEL) | model_output(b, TORCH_MODEL)),
    "quant": Row("table:quant", '`[quant] observer = "percentile"` (tiny_cnn)',
                 lambda repo: set_key(repo / "models/tiny_cnn/model.toml", "quant", "observer", "percentile"),
                 lambda b: table_edit("quant", "quantize", TORCH_MODEL) | model_output(b, TORCH_MODEL)),
    "kernels": Row("table:kernels", '`[kernels] profile = "no-such-profile"` (tiny_cnn): lower fails, nothing before it runs',
                   lambda repo: set_key(repo / "models/tiny_cnn/model.toml", "kernels", "profile", "no-such-profile"),
                   lambda b: readers("kernels", [TORCH_MODEL]), error="kernels.profile: unknown profile 'no-such-profile'"),
    "plan": Row("table:plan", "`[plan] alignment = 64` (tiny_cnn)",
                lambda repo: set_key(repo / "models/tiny_cnn/model.toml", "plan", "alignment", 64),
                lambda b: table_edit("plan", "plan", TORCH_MODEL) | model_output(b, TORCH_MODEL)),
    "codegen": Row("table:codegen", '`[codegen] weights_section = ".rodata.kiln"` (tiny_cnn)',
                   lambda repo: set_key(repo / "models/tiny_cnn/model.toml", "codegen", "weights_section", ".rodata.kiln"),
                   lambda b: table_edit("codegen", "codegen", TORCH_MODEL) | model_output(b, TORCH_MODEL)),
}


def _rename_source(model_dir: Path, name: str) -> None:
    (model_dir / "model.onnx").rename(model_dir / name)
    set_key(model_dir / "model.toml", "model", "source", name)




def _comment_edits(repo: Path) -> None:
    """A comment line before everything (every line number moves), one after code and one inside a function body."""
    path = repo / "models/tiny_cnn/model.py"
    text = path.read_text()
    for old, new in (("import torch\n", "import torch  # a comment after code\n"),
                     ("        x = torch.flatten", "        # a comment line in a function\n        x = torch.flatten")):
        if text.count(old) != 1:
            raise AssertionError(f"{path}: expected exactly one {old!r} to edit")
        text = text.replace(old, new)
    path.write_text("# a new first line\n\n" + text)


def _probe_function(path: Path) -> None:
    name = f"kiln_matrix_probe_{path.stem}"
    append(path, f"\nint {name}(void);\nint {name}(void) {{ return 1; }}\n")


def _bump_version(repo: Path) -> None:
    path = repo / "kiln/__init__.py"
    text, count = re.subn(r'(__version__ = ")([^"]*)(")', r"\g<1>\g<2>+matrix\g<3>", path.read_text())
    if count != 1:
        raise AssertionError(f"{path}: no __version__ to edit")
    path.write_text(text)


def _first_stub(repo: Path) -> Path:
    return sorted((repo / "firmware_stubs").glob("*.c"))[0]


def _runtime_c(repo: Path) -> Path:
    return repo / "runtime/kiln_runtime.c"


def _stub_object(b: Build) -> str:
    return f"{HOST}/_firmware_stubs/{_first_stub(b.repo).stem}.o"


def _all_c(b: Build) -> set[str]:
    return compiled(b, set(b.sources()), changed=True)




def fixed_rows() -> list[Row]:
    """Edits to model sources, C sources, flags, the version and the model set."""
    return [
        Row("none", "no edit (a copy of the built tree)", lambda repo: None, lambda b: set()),
        Row("model.py:comment", "comments in `model.py`: a new first line, a comment after code, a comment line in a function (tiny_cnn)",
            _comment_edits, lambda b: set()),
        Row("model.py:docstring", "a docstring in `model.py`: reruns import, whose graph is the same (tiny_cnn)",
            lambda repo: append(repo / "models/tiny_cnn/model.py", '\n\ndef helper():\n    """A docstring is code."""\n'),
            lambda b: stages(["import"], ["tiny_cnn"])),
        Row("weights", "a weight value: the linear layer's weights scaled in `model.onnx` (onnx_cnn)",
            lambda repo: scale_initializer(repo / "models" / ONNX_MODEL / "model.onnx", "w3", 1.5),
            lambda b: from_stage("import", [ONNX_MODEL]) | model_output(b, ONNX_MODEL)),
        Row("model.toml:comment", "a comment in `model.toml` (tiny_cnn)",
            lambda repo: append(repo / "models/tiny_cnn/model.toml", "# a comment\n"), lambda b: set()),
        Row("model.toml:defaults", "every key of every table written out with its default value (tiny_cnn)",
            explicit_defaults, lambda b: set()),
        Row("calibration-file", "the contents of a `quant.calibration` data file (onnx_cnn)",
            lambda repo: set_input_size(repo / "models" / ONNX_MODEL, 16, seed=8),
            lambda b: readers("quant", [ONNX_MODEL]) | from_stage("quantize", [ONNX_MODEL]) | model_output(b, ONNX_MODEL)),
        Row("plan:budget", "`[plan] budget = 2000` (tiny_cnn, 2560 B layer by layer): the plan tiles its leading layers; "
            "plan reruns and what follows, nothing before it",
            lambda repo: set_key(repo / "models/tiny_cnn/model.toml", "plan", "budget", 2000),
            lambda b: table_edit("plan", "plan", TORCH_MODEL) | model_output(b, TORCH_MODEL)),
        Row("codegen:prefix", '`[codegen] prefix = "cnn"` (tiny_cnn): new symbol names, new model tables; only codegen reads it',
            lambda repo: set_key(repo / "models/tiny_cnn/model.toml", "codegen", "prefix", "cnn"),
            lambda b: stages(["codegen"], ["tiny_cnn"]) | {f"table {HOST}/tiny_cnn/tiny_cnn_models.c", f"table {HOST}/firmware_models.c"}
            | compiled(b, {f"{HOST}/tiny_cnn/tiny_cnn.o", f"{HOST}/tiny_cnn/tiny_cnn_models.o", f"{HOST}/firmware_models.o"}, changed=True)
            | manifests(["tiny_cnn"])),
        Row("template", "a jinja2 template: one more exported constant in `model.c.j2`",
            lambda repo: append(repo / "kiln/codegen/templates/model.c.j2", "\nconst int {{ prefix }}_matrix_probe = 1;\n"),
            lambda b: stages(["codegen"], b.models) | source_lists(["codegen"])
            | compiled(b, {f"{HOST}/{m}/{m}.o" for m in b.models}, changed=True)
            | manifests(b.models)),
        Row("stub.c:comment", "a comment in a kernel stub `.c`", lambda repo: append(_first_stub(repo), "/* a comment */\n"),
            lambda b: compiled(b, {_stub_object(b)}, changed=False)),
        Row("stub.c:code", "a kernel stub `.c`: one more function", lambda repo: _probe_function(_first_stub(repo)),
            lambda b: compiled(b, {_stub_object(b)}, changed=True)),
        Row("runtime.c", "a runtime `.c`: one more function in `kiln_runtime.c`", lambda repo: _probe_function(_runtime_c(repo)),
            lambda b: compiled(b, {f"{HOST}/_runtime/kiln_runtime.o"}, changed=True)),
        Row("runtime.h", "a runtime `.h`: one more declaration in `kiln_runtime.h`",
            lambda repo: append(repo / "runtime/kiln_runtime.h", "int kiln_matrix_probe(void);\n"),
            lambda b: compiled(b, b.includers(b.repo / "runtime/kiln_runtime.h"), changed=False)),
        Row("abi.h", "the kernel ABI header: one more declaration in `kiln_kernels.h`",
            lambda repo: append(repo / "runtime/kiln_kernels.h", "int kiln_matrix_probe(void);\n"),
            lambda b: compiled(b, b.includers(b.repo / "runtime/kiln_kernels.h"), changed=False)),
        Row("cflags", "compiler flags: `-O2` to `-O1` in `SConstruct`",
            lambda repo: replace_once(repo / "SConstruct", '"-O2"', '"-O1"'), _all_c),
        Row("cli.py:help", "a help text of the `kiln` command line (`kiln/cli.py`): no stage runs it",
            lambda repo: replace_once(repo / "kiln/cli.py", "run every stage on a model source, without SCons",
                                      "run every stage on a model source (no SCons needed)"), lambda b: set()),
        Row("version", "the compiler version (`kiln/__init__.py`)", _bump_version,
            lambda b: from_stage(STAGE_NAMES[0], b.models) | source_lists(STAGE_NAMES)),
        Row("model:rename", "renaming a model folder (onnx_cnn to renamed_cnn)",
            lambda repo: (repo / "models" / ONNX_MODEL).rename(repo / "models/renamed_cnn"), lambda b: new_model(b, "renamed_cnn")),
        Row("model:add", "adding a model (a copy of onnx_cnn as extra_cnn)",
            lambda repo: shutil.copytree(repo / "models" / ONNX_MODEL, repo / "models/extra_cnn"), lambda b: new_model(b, "extra_cnn")),
        Row("model:remove", "removing a model (onnx_cnn)", lambda repo: shutil.rmtree(repo / "models" / ONNX_MODEL),
            lambda b: {f"table {HOST}/firmware_models.c", f"cc {HOST}/firmware_models.o", f"link {HOST}/firmware"}),
    ]


def table_rows() -> list[Row]:
    """One row per model.toml table any stage reads; a table without a row is an error."""
    tables = list(dict.fromkeys(t for s in STAGES for t in s.tables))
    missing = [t for t in tables if t not in TABLE_ROWS]
    if missing:
        raise AssertionError(f"model.toml tables without a mutation-matrix row: {missing}")
    return [TABLE_ROWS[t] for t in tables]


def all_rows() -> list[Row]:
    rows = fixed_rows() + table_rows() + source_module_rows()
    ids = [r.id for r in rows]
    if len(ids) != len(set(ids)):
        raise AssertionError(f"duplicate row ids: {ids}")
    return rows


# -- the table in docs/build.md ------------------------------------------------------------
def describe(actions: set[str], b: Build) -> tuple[str, str]:
    """A readable (stage actions, C actions) pair for a set of actions."""
    per_model: dict[str, list[str]] = {}
    for a in sorted(x for x in actions if x.startswith("kiln ")):
        _, stage, model = a.split()
        per_model.setdefault(model, []).append(stage)
    groups: dict[str, list[str]] = {}
    for model, names in per_model.items():
        groups.setdefault(_stage_span(names), []).append(model)
    stage_text = "; ".join(f"{span} ({', '.join(sorted(models))})" for span, models in groups.items()) or "none"
    objects, programs = set(b.sources()), set(b.programs())
    cc = {a.split()[1] for a in actions if a.startswith("cc ")}
    links = {a.split()[1] for a in actions if a.startswith("link ")}
    tables = sorted(Path(a.split()[1]).name for a in actions if a.startswith("table "))
    parts = []
    if tables:
        parts.append("table " + ", ".join(tables))
    if cc:
        parts.append("cc every object" if cc == objects else "cc " + _objects_text(cc, b))
    if links:
        parts.append("link every program" if links == programs else "link " + ", ".join(sorted(Path(p).name for p in links)))
    return stage_text, "; ".join(parts) or "none"


def _objects_text(objects: set[str], b: Build) -> str:
    """Object names, with "every kernel stub" standing for all of `firmware_stubs/` (a stable text)."""
    stubs = {o for o in b.sources() if "/_firmware_stubs/" in o}
    names = sorted(Path(o).name for o in objects - stubs) if stubs <= objects else sorted(Path(o).name for o in objects)
    return ", ".join(names + (["every kernel stub"] if stubs <= objects else []))


def _stage_span(names: list[str]) -> str:
    order = sorted(names, key=STAGE_NAMES.index)
    first, last = STAGE_NAMES.index(order[0]), STAGE_NAMES.index(order[-1])
    if len(order) > 2 and list(STAGE_NAMES[first:last + 1]) == order:
        return f"{order[0]} → {order[-1]}"
    return ", ".join(order)


def markdown_table(rows: list[Row], b: Build) -> str:
    lines = ["| edit | stage actions | C actions |", "|---|---|---|"]
    for row in rows:
        stage_text, c_text = describe(row.expected(b), b)
        note = " — the build fails" if row.error else ""
        lines.append(f"| {row.edit}{note} | {stage_text} | {c_text} |")
    return "\n".join(lines) + "\n"
