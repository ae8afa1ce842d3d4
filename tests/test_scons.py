"""The SCons build: exactly the stages an edit invalidates rerun, and builds are reproducible."""
from __future__ import annotations

from pathlib import Path

from conftest import scons
from kiln.stages import STAGES

STAGE_NAMES = [s.name for s in STAGES]
MODELS = ("tiny_cnn", "tiny_resnet")


def stages_from(first: str, models=MODELS) -> set[tuple[str, str]]:
    names = STAGE_NAMES[STAGE_NAMES.index(first):]
    return {(s, m) for s in names for m in models}


def prepend_comment(path: Path) -> None:
    path.write_text("# a comment that shifts every line number\n" + path.read_text())


def test_incremental_rebuilds_exactly_what_an_edit_invalidates(make_repo):
    repo = make_repo(MODELS)
    actions, _ = scons(repo)
    assert set(actions) == stages_from("import") and len(actions) == len(set(actions))

    actions, log = scons(repo)
    assert actions == [], log

    prepend_comment(repo / "models/tiny_cnn/model.py")
    actions, log = scons(repo)
    assert actions == [], log  # comments are not part of import's signature

    model_py = repo / "models/tiny_cnn/model.py"
    model_py.write_text(model_py.read_text() + "\n_UNUSED = 1\n")
    actions, log = scons(repo)
    assert actions == [("import", "tiny_cnn")], log  # code is; the imported graph is the same, so nothing follows

    toml = repo / "models/tiny_resnet/model.toml"
    toml.write_text(toml.read_text().replace('observer = "minmax"', 'observer = "percentile"'))
    actions, log = scons(repo)
    assert set(actions) == stages_from("quantize", ["tiny_resnet"]), log

    plan_module = repo / "kiln/plan/offsets.py"
    plan_module.write_text(plan_module.read_text() + "\n# an edit to a source module of the plan stage\n")
    actions, log = scons(repo)
    assert {a for a in actions if a[0] in ("import", "normalize", "quantize", "lower")} == set(), log
    assert {("plan", m) for m in MODELS} <= set(actions), log


def test_two_folders_build_identical_bytes(make_repo):
    first, second = make_repo(MODELS, "one"), make_repo(MODELS, "two")
    scons(first, "-j2")
    scons(second, "-j1")
    artifacts = sorted(p.relative_to(first) for p in (first / "build").rglob("*") if p.suffix in (".kir", ".c", ".h", ".npz"))
    assert len(artifacts) >= 2 * (len(STAGES) + 2)
    for rel in artifacts:
        assert (first / rel).read_bytes() == (second / rel).read_bytes(), rel
