"""Shared fixtures: temporary copies of the repository, SCons runs, compiled models."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# SCons runs in tests use fresh stage processes: each test's copy of the project would start its own warm
# worker (a worker serves one Kiln folder). tests/test_workers.py turns them on, in folders of its own.
os.environ["KILN_WORKERS"] = "0"
STAGE_LINE = re.compile(r"^(?:\[\d+/\d+\] )?kiln (\w+) (\S+)$")  # `[k/n] kiln STAGE MODEL`


def project_files() -> list[Path]:
    """The files a clean clone has (tracked, plus new files not ignored), relative to the root."""
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True)
    return [Path(p) for p in out.stdout.decode().split("\0") if p and (ROOT / p).is_file()]


def copy_repo(dest: Path, models: tuple[str, ...]) -> Path:
    """Copy the project into `dest`, keeping only the named model folders."""
    for rel in project_files():
        if rel.parts[0] == "models" and rel.parts[1] not in models:
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target)
    return dest


def scons(repo: Path, *args: str, check: bool = True) -> tuple[list[tuple[str, str]], str]:
    """Run scons in `repo`; returns the (stage, model) actions it ran and the whole log."""
    proc = subprocess.run([sys.executable, "-m", "SCons", "-Q", *args], cwd=repo, capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    if check and proc.returncode != 0:
        raise AssertionError(f"scons {' '.join(args)} failed ({proc.returncode}):\n{log}")
    actions = [m.groups() for line in log.splitlines() if (m := STAGE_LINE.match(line.strip()))]
    return actions, log


@pytest.fixture
def make_repo(tmp_path):
    """make_repo(models=(...), name="repo") -> a fresh copy of the project in a temp folder."""

    def make(models: tuple[str, ...] = ("tiny_cnn", "tiny_resnet"), name: str = "repo") -> Path:
        return copy_repo(tmp_path / name, models)

    return make


@pytest.fixture(scope="session")
def compiled(tmp_path_factory):
    """compiled(model) -> a folder with every artifact of `kiln compile models/<model>`, built once per
    test session (xdist workers share it); programs built there are installed atomically."""
    from model_builds import ModelBuilds, shared_root

    return ModelBuilds(shared_root(tmp_path_factory.getbasetemp(), "kiln-models")).complete


@pytest.fixture(scope="session")
def calibration(compiled):
    """calibration(model) -> the calibration samples the model's build keeps, per input."""
    from kiln.quantize.kept import load_samples

    return lambda model: load_samples(compiled(model)).inputs


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """Kiln's wheel, built once per test session (xdist workers share it) from a copy of the project (setuptools
    writes build folders where it builds)."""
    from model_builds import _locked, shared_root

    folder = shared_root(tmp_path_factory.getbasetemp(), "kiln-wheel")
    with _locked(folder) as done:
        if not done:
            source = copy_repo(folder / "source", ())
            proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                                   str(folder / "dist"), str(source)], capture_output=True, text=True, timeout=600)
            assert proc.returncode == 0, proc.stdout + proc.stderr
    (built,) = (folder / "dist").glob("*.whl")
    return built


@pytest.fixture(scope="session")
def converted(tmp_path_factory) -> Path:
    """TensorFlow's TFLite converter's files (tests/tflite_convert.py, run in `.venv-tf`), written once per session
    (xdist workers share them)."""
    from model_builds import _locked, shared_root

    out, tf_python = shared_root(tmp_path_factory.getbasetemp(), "tflite-converter"), ROOT / ".venv-tf/bin/python"
    with _locked(out) as done:
        if not done:
            assert tf_python.exists(), f"{tf_python} is missing: run scripts/setup.sh (it creates the TensorFlow environment)"
            proc = subprocess.run([str(tf_python), str(ROOT / "tests/tflite_convert.py"), str(out)], capture_output=True,
                                  text=True, timeout=600)
            assert proc.returncode == 0, f"the TFLite converter failed:\n{proc.stderr[-4000:]}"
    return out


@pytest.fixture(scope="session")
def external_repo_run(tmp_path_factory) -> tuple[Path, dict]:
    """examples/external_repo with the SConstruct docs/build.md shows, after the page's commands ran in it
    (tests/external_repo.py): the repository and each command's result."""
    import external_repo

    base = tmp_path_factory.mktemp("external")
    repo = external_repo.lay_out(base)
    return repo, external_repo.run_commands(base, external_repo.documented_env(base))
