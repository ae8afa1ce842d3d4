"""Property: a hostile string in any string-valued model.toml key, or as a model folder name, is a
clear one-line error or gives firmware with nothing unexpected in it — no symbol beyond the
model's two exports, no identifier the ordinary output lacks, no file included that it does not
include — and never reaches a shell (a real build with drawn folder names runs exactly the stages).

Examples are seeded (derandomized), so a run is reproducible.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from conftest import ROOT
from scons_matrix import add_onnx_model, fresh_clone, shared_snapshot
from kiln import config as model_config
from kiln.check import check_all
from kiln.codegen import generate
from kiln.names import c_identifier
from kiln.errors import KilnError
from kiln.ir import load
from kiln.config import config_schema
from kiln.runner import run_stage

FRAGMENTS = ['"', "'", "\\", "\n", "\r", "\t", "*/", "/*", "//", "??=", "#include </etc/passwd>", "#define X",
             '")));int kiln_injected(void){return 42;}', "kiln_injected", "`touch PWN`", "$(touch PWN)", "$HOME",
             ";", "|", "&", ">", "<", " ", "..", "/", "#", "-", "%s", "\x00", "é", "\u202e"]
HOSTILE = st.one_of(
    st.text(max_size=30),
    st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=30),
    st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.from_regex(r"[A-Za-z_.][A-Za-z0-9_.]{0,12}", fullmatch=True)),
             min_size=1, max_size=5).map("".join),
    st.from_regex(r"[A-Za-z_.][A-Za-z0-9_.]{0,40}", fullmatch=True),  # often valid: these reach C
)
# Every key whose value is a string or a list of strings, and the free-form `inputs` table's input names
# and dtype (its shape is a list of integers).
STRING_KEYS = sorted([(table, key.name) for table, keys in config_schema().items() for key in keys.values()
                      if key.type in (str, list)] + [("inputs", "<name>"), ("inputs", "dtype")])
# Which stage reads each key that does not reach C (run on the already-built inputs when a value is accepted).
READER = {"model": "import", "inputs": "import", "normalize": "normalize", "quant": "quantize", "kernels": "lower"}
CFLAGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O1"]
STRINGS = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'')
MARKER = re.compile(r'^# \d+ "((?:[^"\\]|\\.)*)".*$', re.M)


def compile_model(folder: Path, model: str, files: dict[str, bytes]) -> tuple[set[str], set[str], set[str]]:
    """Write the generated files and compile them: (global symbols, identifiers, included files)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    source, obj = folder / f"{model}.c", folder / "model.o"
    flags = [*CFLAGS, "-I", str(ROOT / "runtime")]
    pre = subprocess.run(["gcc", *flags, "-E", str(source)], capture_output=True, text=True, check=True).stdout
    subprocess.run(["gcc", *flags, "-c", str(source), "-o", str(obj)], capture_output=True, text=True, check=True)
    nm = subprocess.run(["nm", "-g", "--defined-only", str(obj)], capture_output=True, text=True, check=True).stdout
    included = {Path(f).name if Path(f).parent == folder else f for f in MARKER.findall(pre) if not f.startswith("<")}
    code = STRINGS.sub('""', MARKER.sub("", pre))
    return {line.split()[-1] for line in nm.splitlines()}, set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", code)), included


@pytest.fixture(scope="module")
def planned(compiled):
    return load(compiled("tiny_cnn") / "planned.kir", "planned")


@pytest.fixture(scope="module")
def baseline(planned, tmp_path_factory):
    """What tiny_cnn's own generated C defines, uses and includes (with its identifiers' prefix neutral)."""
    files = generate(planned, "tiny_cnn", model_config.validate({}, "model.toml")["codegen"])
    symbols, idents, included = compile_model(tmp_path_factory.mktemp("baseline"), "tiny_cnn", files)
    assert symbols == {"tiny_cnn_invoke", "tiny_cnn_model"}
    return idents - symbols, {f.replace("tiny_cnn", "MODEL") for f in included}


def assert_nothing_unexpected(baseline, folder: Path, model: str, prefix: str, files: dict[str, bytes]) -> None:
    symbols, idents, included = compile_model(folder, model, files)
    exports = {f"{prefix}_invoke", f"{prefix}_model"}
    assert symbols == exports
    allowed = baseline[0] | {"section"}  # the attribute a weights_section adds
    assert idents - exports <= allowed, sorted(idents - exports - allowed)
    assert {f if f.startswith("/") else f.replace(model, "MODEL", 1) for f in included} == baseline[1]


def one_line(exc: KilnError, *needles: str) -> None:
    assert "\n" not in str(exc) and str(exc), str(exc)
    for needle in needles:
        assert needle in str(exc), (needle, str(exc))


@pytest.mark.parametrize("key", STRING_KEYS, ids=".".join)
@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(value=HOSTILE)
def test_any_string_in_any_key_is_an_error_or_harmless(planned, baseline, compiled, tmp_path_factory, key, value):
    table, name = key
    if table == "inputs":
        spec = {"shape": [1, 1, 16, 16]}
        raw = {value: spec} if name == "<name>" else {"image": {**spec, "dtype": value}}
    else:
        raw = {name: [value] if config_schema()[table][name].type is list else value}
    try:
        cfg = model_config.validate({table: raw}, "model.toml")
    except KilnError as exc:
        return one_line(exc, "model.toml", f"{table}.{name}" if table != "inputs" else "inputs")
    if table == "codegen":  # reaches C: compile it and look
        prefix = cfg["codegen"]["prefix"] or "tiny_cnn"
        files = generate(planned, "tiny_cnn", cfg["codegen"])
        return assert_nothing_unexpected(baseline, tmp_path_factory.mktemp("c"), "tiny_cnn", prefix, files)
    # Never reaches C: the stage reading it refuses it in one line or runs (on a copy of built inputs).
    work = Path(shutil.copytree(compiled("tiny_cnn"), tmp_path_factory.mktemp("stage") / "tiny_cnn"))
    model_dir = Path(shutil.copytree(ROOT / "models/tiny_cnn", work.parent / "model", ignore=shutil.ignore_patterns("__pycache__")))
    base = model_config.load(model_dir / "model.toml")
    base[table] = cfg[table]
    try:
        run_stage(READER[table], "tiny_cnn", model_dir, base, work)
    except KilnError as exc:
        one_line(exc)


def model_names() -> st.SearchStrategy[str]:
    return st.one_of(HOSTILE, st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=4).map("".join))


def _accepted(name: str) -> bool:
    try:
        model_config.check_model_name(name, "models")
    except KilnError as exc:
        one_line(exc, "model name")
        return False
    return True


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(name=model_names())
def test_any_folder_name_is_refused_or_generates_clean_c(planned, baseline, tmp_path_factory, name):
    if not _accepted(name):
        return
    files = generate(planned, name, model_config.validate({}, "model.toml")["codegen"])
    assert sorted(files) == sorted([f"{name}.c", f"{name}.h"])
    assert_nothing_unexpected(baseline, tmp_path_factory.mktemp("c"), name, c_identifier(name), files)


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory) -> Path:
    return shared_snapshot(tmp_path_factory)


@settings(max_examples=1, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(names=st.lists(model_names(), min_size=2, max_size=2, unique_by=c_identifier))
def test_drawn_folder_names_build_exactly_their_models(snapshot, tmp_path_factory, names):
    assume(all(_accepted(n) and len(n.encode()) < 100 for n in names))
    repo = fresh_clone(snapshot, tmp_path_factory.mktemp("names") / "repo")
    shutil.rmtree(repo / "models")
    for name in names:
        add_onnx_model(repo / "models" / name, size=8)
    before = {p.name for p in repo.iterdir()}
    proc = subprocess.run([sys.executable, "-m", "SCons", "-Q", "-j2"], cwd=repo, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [p for p in {p.name for p in repo.iterdir()} - before if p != "build" and not p.startswith(".sconsign")] == []
    rows = check_all(repo / "build/host")
    assert sorted(r["model"] for r in rows) == sorted(names) and all(r["bit_exact"] == r["samples"] for r in rows)
