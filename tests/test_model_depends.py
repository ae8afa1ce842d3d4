"""`model.depends`: files outside a model folder that its model.py loads, tracked by the build.

Editing a shared file re-runs the import stage of exactly the models that
list it (and early cut-off stops there when their graphs come out
byte-identical); a model.py that loads an undeclared file from outside its
folder, or a declaration of a missing file, is a one-line error.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from conftest import scons
from kiln.cli import main as kiln
from kiln.stages import STAGES

SHARED = "models/_shared/scale.py"
MODEL_PY = """\
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "_shared"))
import scale  # noqa: E402


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 6)
        self.fc2 = torch.nn.Linear(6, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def model():
    torch.manual_seed({seed})
    net = Net()
    with torch.no_grad():
        net.fc1.weight.mul_(scale.GAIN)
    return net.eval()


def example_inputs():
    return (torch.zeros(1, 4),)


def calibration_data():
    return torch.linspace(-2.0, 2.0, 32).reshape(8, 1, 4)
"""


def add_model(repo: Path, name: str, seed: int, depends: str | None) -> None:
    folder = repo / "models" / name
    folder.mkdir(parents=True)
    (folder / "model.py").write_text(MODEL_PY.format(seed=seed))
    declared = f"depends = [{depends!r}]\n" if depends is not None else ""
    (folder / "model.toml").write_text(f'[model]\nsource = "model.py"\n{declared}\n[inputs.x]\nshape = [1, 4]\n')


@pytest.fixture
def shared_repo(make_repo) -> Path:
    """tiny_cnn (no dependency) and two models `a`, `b` whose model.py loads models/_shared/scale.py."""
    repo = make_repo(("tiny_cnn",))
    (repo / SHARED).parent.mkdir()
    (repo / SHARED).write_text("GAIN = 1.5\n")
    add_model(repo, "a", 0, "../_shared/scale.py")
    add_model(repo, "b", 1, "../_shared/scale.py")
    return repo


def test_editing_a_shared_file_reruns_import_of_its_dependents_only(shared_repo):
    models = ("a", "b", "tiny_cnn")
    chains = [f"{m}-codegen" for m in models]  # every stage; the C compile and link are not what this is about
    actions, log = scons(shared_repo, "-j2", *chains)
    assert set(actions) == {(s.name, m) for s in STAGES for m in models}, log

    (shared_repo / SHARED).write_text("# a comment: not part of the signature\nGAIN = 1.5\n")
    actions, log = scons(shared_repo, *chains)
    assert actions == [], log

    (shared_repo / SHARED).write_text("GAIN = 1.5\nUNUSED = 0  # code: import reruns, the graphs stay byte-identical\n")
    actions, log = scons(shared_repo, *chains)
    assert sorted(actions) == [("import", "a"), ("import", "b")], log

    (shared_repo / SHARED).write_text("GAIN = 0.5\n")
    actions, log = scons(shared_repo, "-j2", *chains)
    assert set(actions) == {(s.name, m) for s in STAGES for m in ("a", "b")}, log


def test_an_undeclared_file_from_outside_the_folder_is_an_error(shared_repo, tmp_path, capsys):
    toml = shared_repo / "models/a/model.toml"
    toml.write_text(toml.read_text().replace("depends = ['../_shared/scale.py']\n", ""))
    code = kiln(["stage", "import", "--model-dir", str(shared_repo / "models/a"), "--build-dir", str(tmp_path / "a")])
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1
    assert "model.py: loads ../_shared/scale.py from outside the model folder" in err
    assert 'add "../_shared/scale.py" to model.depends' in err


@pytest.mark.parametrize("entry, message", [
    ("../_shared/missing.py", "model.depends: ../_shared/missing.py does not exist"),
    ("/shared/scale.py", "model.depends: '/shared/scale.py' is absolute"),
])
def test_a_bad_declaration_stops_the_build_with_one_line(shared_repo, entry, message):
    toml = shared_repo / "models/b/model.toml"
    toml.write_text(toml.read_text().replace("../_shared/scale.py", entry))
    _, log = scons(shared_repo, check=False)
    errors = [line for line in log.splitlines() if line.startswith("kiln: error:")]
    assert len(errors) == 1 and message in errors[0] and "models/b/model.toml" in errors[0], log
    assert "Traceback" not in log


def test_the_zoo_kit_is_tracked_for_the_zoo_models(make_repo):
    """The real kit: code added to models/_kit/zoo.py re-runs import of a zoo model, and nothing after it; a
    comment runs nothing."""
    repo = make_repo(("_kit", "ad_autoencoder", "tiny_cnn"))
    targets = ("ad_autoencoder-normalize", "tiny_cnn-normalize")
    actions, log = scons(repo, *targets)
    assert sorted(actions) == [("import", "ad_autoencoder"), ("import", "tiny_cnn"),
                               ("normalize", "ad_autoencoder"), ("normalize", "tiny_cnn")], log
    kit = repo / "models/_kit/zoo.py"
    kit.write_text(kit.read_text() + "\n# a comment in the shared kit\n")
    actions, log = scons(repo, *targets)
    assert actions == [], log
    kit.write_text(kit.read_text() + textwrap.dedent("""
        _UNUSED = "an edit to the shared kit that changes no weight"
    """))
    actions, log = scons(repo, *targets)
    assert actions == [("import", "ad_autoencoder")], log
