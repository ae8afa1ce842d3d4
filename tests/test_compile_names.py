"""`kiln compile` names a model as the build does: a folder, or a source named `model.*`, takes the folder's name;
`--name` sets it, checked as a model folder's name is."""
from __future__ import annotations

import subprocess
import sys

import pytest

from scons_matrix import ONNX_MODEL, clone_snapshot, shared_snapshot


def kiln(cwd, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kiln", *args], cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """The snapshot (tiny_cnn and onnx_cnn, built by SCons), cloned once for this module."""
    return clone_snapshot(shared_snapshot(tmp_path_factory), tmp_path_factory.mktemp("names") / "repo")


def test_a_model_source_takes_its_folders_name_and_the_builds_bytes(repo):
    proc = kiln(repo, "compile", f"models/{ONNX_MODEL}/model.onnx", "-o", "out")
    assert proc.returncode == 0 and proc.stderr == f"kiln: compiled {ONNX_MODEL} into out\n", proc.stderr
    assert sorted(p.name for p in (repo / "out").glob("*.[ch]")) == [f"{ONNX_MODEL}.c", f"{ONNX_MODEL}.h"]
    for name in (f"{ONNX_MODEL}.c", f"{ONNX_MODEL}.h"):
        assert (repo / "out" / name).read_bytes() == (repo / "build/host" / ONNX_MODEL / name).read_bytes()


def test_name_sets_the_files_and_symbols(repo):
    proc = kiln(repo, "compile", f"models/{ONNX_MODEL}/model.onnx", "--name", "kws", "-o", "named")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (repo / "named").glob("*.[ch]")) == ["kws.c", "kws.h"]
    assert "kws_invoke(" in (repo / "named/kws.h").read_text()


@pytest.mark.parametrize("name", ["a/b", "..", 'say"hi', "x?y"])
def test_a_bad_name_is_one_line_and_writes_nothing(repo, name):
    proc = kiln(repo, "compile", f"models/{ONNX_MODEL}/model.onnx", "--name", name, "-o", "bad")
    assert proc.returncode == 1 and proc.stderr.startswith(f"kiln: error: --name: model name {name!r}"), proc.stderr
    assert proc.stderr.count("\n") == 1 and not (repo / "bad").exists()
