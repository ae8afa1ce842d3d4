"""The build against hostile folders and files: any printable folder name builds (no shell ever
interprets it) or is refused in one line; a model source outside its folder or a missing
calibration file stops the build in one line naming model.toml."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from scons_matrix import ONNX_MODEL, TORCH_MODEL, add_onnx_model, fresh_clone, set_key, shared_snapshot
from kiln.check import check_all

# Each would run `touch` (or expand $HOME) if a folder name reached `sh -c` unquoted; '#' starts a
# top-relative path in SCons, a leading '-' an option.
HOSTILE = ("x_a;touch PWN1;b", "x_a`touch PWN2`b", "x_sp ace;touch PWN3 $HOME", "#h'q -x")


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory) -> Path:
    return shared_snapshot(tmp_path_factory)


def scons(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "SCons", "-Q", *args], cwd=repo, capture_output=True, text=True, timeout=900)


def repo_with(snapshot: Path, dest: Path, names: tuple[str, ...]) -> Path:
    """A clone whose only models are small ONNX classifiers in folders named `names`."""
    repo = fresh_clone(snapshot, dest)
    shutil.rmtree(repo / "models")
    for name in names:
        add_onnx_model(repo / "models" / name, size=8)
    return repo


def error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("kiln: error:")]


def test_hostile_folder_names_build_exactly_their_models(snapshot, tmp_path):
    repo = repo_with(snapshot, tmp_path / "repo", HOSTILE)
    before = {p.name for p in repo.iterdir()}
    proc = scons(repo, "-j2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    made = {p.name for p in repo.iterdir()} - before - {"build"}
    assert [m for m in made if not m.startswith(".sconsign")] == []  # no PWN files, no stray objects
    assert not list(repo.rglob("PWN*"))
    assert sorted(p.name for p in (repo / "build/host").iterdir() if p.name[0] not in "_f") == sorted(HOSTILE)
    for name in HOSTILE:
        assert (repo / "build/host" / name / name).is_file()  # the program, under the exact name
    rows = check_all(repo / "build/host")
    assert [(r["model"], r["bit_exact"]) for r in rows] == [(n, r["samples"]) for n, r in zip(sorted(HOSTILE), rows)]
    proc = scons(repo, "x_sp ace;touch PWN3 $HOME", "#h'q -x-plan")
    assert proc.returncode == 0 and "is up to date" in proc.stdout and "kiln " not in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("name", ['x_q"uote', "x_back\\slash", "x_q?", "x_tab\tname"])
def test_a_folder_name_that_cannot_name_c_files_is_refused_in_one_line(snapshot, tmp_path, name):
    repo = repo_with(snapshot, tmp_path / "repo", (name,))
    proc = scons(repo)
    assert proc.returncode == 2 and not (repo / "build").exists(), proc.stdout + proc.stderr
    errors = error_lines(proc)
    assert len(errors) == 1 and repr(name) in errors[0] and "model name" in errors[0], proc.stdout + proc.stderr


@pytest.mark.parametrize("source", ["../_shared/model.py", "{shared}/model.py"])
def test_a_source_outside_the_model_folder_stops_the_build(snapshot, tmp_path, source):
    repo = fresh_clone(snapshot, tmp_path / "repo")
    shared = repo / "models" / "_shared"
    shared.mkdir()
    shutil.copy(repo / "models" / TORCH_MODEL / "model.py", shared / "model.py")
    set_key(repo / "models" / TORCH_MODEL / "model.toml", "model", "source", source.format(shared=shared))
    proc = scons(repo)
    errors = error_lines(proc)
    assert proc.returncode == 2 and len(errors) == 1, proc.stdout + proc.stderr
    assert "model.toml" in errors[0] and "model.source" in errors[0] and "model.depends" in errors[0]
    assert not (repo / "build/host" / TORCH_MODEL).exists()  # nothing of it was built (the other model was)


def test_a_missing_calibration_file_stops_the_build_naming_it(snapshot, tmp_path):
    repo = fresh_clone(snapshot, tmp_path / "repo")
    set_key(repo / "models" / ONNX_MODEL / "model.toml", "quant", "calibration", ["gone.npy"])
    proc = scons(repo)
    errors = error_lines(proc)
    assert proc.returncode == 2 and len(errors) == 1, proc.stdout + proc.stderr
    assert "model.toml" in errors[0] and "quant.calibration: gone.npy does not exist" in errors[0]
    assert "Source" not in proc.stdout + proc.stderr


def test_two_models_with_one_symbol_prefix_stop_the_build(snapshot, tmp_path):
    repo = repo_with(snapshot, tmp_path / "repo", ("a b", "a_b"))  # both sanitize to the prefix a_b
    proc = scons(repo)
    errors = error_lines(proc)
    assert proc.returncode == 2 and len(errors) == 1 and "prefix" in errors[0] and "'a b'" in errors[0], proc.stdout + proc.stderr
