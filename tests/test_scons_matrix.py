"""The mutation matrix: each kind of edit rebuilds exactly the actions it must, early cut-off
included, and a stage's registered source modules cover every module it runs."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from scons_matrix import (ONNX_MODEL, TORCH_MODEL, Build, Row, all_rows, clone_snapshot, markdown_table, own_file, run_scons,
                          shared_snapshot)
from kiln.stages import STAGES

ROWS = all_rows()


@pytest.fixture(scope="session")
def snapshot(tmp_path_factory) -> Path:
    return shared_snapshot(tmp_path_factory)


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_edit_rebuilds_exactly(snapshot: Path, tmp_path: Path, row: Row) -> None:
    repo = clone_snapshot(snapshot, tmp_path / "repo")
    row.apply(repo)
    actions, log, status = run_scons(repo, "-j2", check=row.error is None)
    assert actions == row.expected(Build(snapshot)), log
    if row.error:
        errors = [line for line in log.splitlines() if "kiln: error:" in line]
        assert status != 0 and len(errors) == 1 and row.error in errors[0], log


def test_every_stage_and_table_has_rows() -> None:
    ids = {r.id for r in ROWS}
    assert {f"table:{t}" for s in STAGES for t in s.tables} <= ids
    assert {f"module:{own_file(s.name).relative_to(ROOT).as_posix()}" for s in STAGES} <= ids  # cut-off per stage


def test_every_table_is_read_by_one_stage() -> None:
    """A stage reads its own tables only, so an edit of one table reruns one stage onward (no `[codegen]` in plan)."""
    readers = [t for s in STAGES for t in s.tables]
    assert sorted(readers) == sorted(set(readers))


def test_docs_table_is_the_matrix(snapshot: Path) -> None:
    docs = (ROOT / "docs/build.md").read_text()
    assert markdown_table(ROWS, Build(snapshot)) in docs, "regenerate it: python bench/incremental.py --markdown"


# -- never fewer: a stage's build signature covers every module it imports ------------------
RECORDER = """
import runpy, sys
sys.argv = ["kiln.runner", *sys.argv[1:]]
try:
    runpy.run_module("kiln.runner", run_name="__main__", alter_sys=True)
except SystemExit as exc:
    if exc.code:
        raise
for module in list(sys.modules.values()):
    if getattr(module, "__file__", None):
        print(module.__file__)
"""


def imported_files(repo: Path, stage: str, model: str) -> set[Path]:
    """The Kiln files a stage process (`python -m kiln.runner`, what SCons runs) has imported when it exits."""
    proc = subprocess.run([sys.executable, "-c", RECORDER, stage, "--model-dir", f"models/{model}",
                           "--build-dir", f"build/host/{model}"], cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    package = (repo / "kiln").resolve()
    return {Path(f).resolve() for f in proc.stdout.splitlines() if Path(f).resolve().is_relative_to(package)}


def add_pt2_model(repo: Path) -> str:
    """tiny_cnn as an exported program (.pt2): the third import route."""
    import torch

    sys.path.insert(0, str(repo / "models/tiny_cnn"))
    try:
        import model as tiny_cnn
    finally:
        sys.path.pop(0)
        sys.modules.pop("model", None)
    folder = repo / "models/pt2_cnn"
    folder.mkdir()
    torch.export.save(torch.export.export(tiny_cnn.model(), tiny_cnn.example_inputs()), folder / "model.pt2")
    (folder / "model.toml").write_text('[model]\nsource = "model.pt2"\n')
    return "pt2_cnn"


def test_stage_signatures_cover_every_imported_module(snapshot: Path, tmp_path: Path) -> None:
    repo = clone_snapshot(snapshot, tmp_path / "repo")
    runs = [(s.name, model) for model in (TORCH_MODEL, ONNX_MODEL) for s in STAGES]
    runs.append(("import", add_pt2_model(repo)))
    by_stage = {s.name: s for s in STAGES}
    for stage, model in runs:
        (repo / "build/host" / model).mkdir(parents=True, exist_ok=True)
        imported = imported_files(repo, stage, model)
        registered = {p.resolve() for p in by_stage[stage].source_files(repo)}
        missing = sorted(p.relative_to(repo.resolve()).as_posix() for p in imported - registered)
        assert not missing, f"stage {stage} ({model}) imports modules outside its registered source modules: {missing}"
        assert imported & registered, f"stage {stage} ({model}): recorded no Kiln module at all"
