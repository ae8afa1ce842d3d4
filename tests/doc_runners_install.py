"""The runner of docs/build.md's install lines: a new user's whole path, from the wheel (tests/doc_commands.py).

What it does is what a firmware engineer who has never seen Kiln's source does, with only the commands the docs
show: install the wheel into a fresh virtual environment with its extras, from a package index that is a folder
(this checkout's wheel and the pinned dependency wheels; no pip configuration, no network); write a firmware
repository from scratch — docs/build.md's SConstruct, an own main.c that prints with printf, a small PyTorch
model, and a `.tflite` file TensorFlow's converter wrote, added with `kiln new`; build it for the host and the
Cortex-M4 board; run the app on both; check every model of both builds bit for bit against the reference; then
compile `.tflite` files (among them one with TFLite Micro's own benchmark model's bias quirk) with `kiln compile`
and run them with `kiln run`, each output bit for bit TFLite Micro's.
"""
from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import sys
import tomllib
import zipfile
from pathlib import Path

import numpy as np
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import external_repo
from conftest import ROOT
from doc_commands import Command, Docs, commands, model_stages, runs, stage_actions
from scons_matrix import parse_actions
from test_tflite_tflm_models import depthwise_biases_along_dimension_3, edited
from kiln.ir import load

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
WHEELHOUSE = Path(sys.prefix) / "wheelhouse"  # scripts/setup.sh: the wheels of Kiln's dependencies, pinned


def hard_link(source: str, target: str) -> None:
    """A file's bytes at `target` without copying them, or a copy on another file system."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def install_from_here(names: list[str], venv: Path) -> None:
    """Install the distributions `names` and what they require into `venv` as this environment has them, hard-linked
    into a folder of `venv` that a .pth file puts first on its path (pip sees them as installed, ahead of older
    copies the virtual environment came with). For what no local wheel holds: torch, tflite-micro."""
    folder, seen = venv / "installed-here", set()
    folder.mkdir(exist_ok=True)
    while names:
        requirement = Requirement(names.pop())
        if canonicalize_name(requirement.name) in seen or (requirement.marker and not requirement.marker.evaluate({"extra": ""})):
            continue
        seen.add(canonicalize_name(requirement.name))
        dist = importlib.metadata.distribution(requirement.name)
        for top in {f.parts[0] for f in dist.files} - {"..", "__pycache__"}:
            source, target = Path(dist.locate_file(top)), folder / top
            if target.exists():
                continue
            if source.is_dir():
                shutil.copytree(source, target, copy_function=hard_link, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                hard_link(str(source), str(target))
        names += dist.requires or []
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "installed-here.pth").write_text(f"import sys; sys.path.insert(0, {str(folder)!r})\n")


def documented(pattern: str) -> Command:
    """The one documented command that matches `pattern`: the journey uses nothing the docs do not show."""
    (found,) = [c for c in commands() if re.fullmatch(pattern, c.text)]
    return found


def pin(extra: str) -> str:
    (requirement,) = PROJECT["optional-dependencies"][extra]
    return requirement


def firmware_repository(base: Path, tflite: Path) -> Path:
    """`base/examples/external_repo` (the folder the page's commands `cd` into), written from scratch: the page's
    SConstruct, the firmware's own main.c, its PyTorch gesture model; the `.tflite` file beside it, to add."""
    repo = base / "examples/external_repo"
    (repo / "models/gesture").mkdir(parents=True)
    (repo / "SConstruct").write_text(external_repo.doc_sconstruct())
    shutil.copyfile(external_repo.EXAMPLE / "main.c", repo / "main.c")
    for name in ("model.py", "model.toml"):
        shutil.copyfile(external_repo.EXAMPLE / "models/gesture" / name, repo / "models/gesture" / name)
    shutil.copyfile(tflite, repo / "kws.tflite")
    return repo


def tflm_output(model: bytes, sample: np.ndarray) -> np.ndarray:
    """TFLite Micro's output for one sample of a one-input model."""
    from tflite_micro.python.tflite_micro import runtime

    interpreter = runtime.Interpreter.from_bytes(model, arena_size=1 << 22)
    interpreter.set_input(np.ascontiguousarray(sample), 0)
    interpreter.invoke()
    return interpreter.get_output(0)


@runs(r"python3 -m venv \.venv && \.venv/bin/pip install kiln-mcu", r"\.venv/bin/pip install 'kiln-mcu\[(torch|tflite)\]'",
      r"\.venv/bin/scons -j2")
def new_user_from_the_wheel(docs: Docs, cmds: list[Command]) -> None:
    """The whole path (module docstring). torch and tflite-micro, which no local wheel holds, come from the test
    environment (with what they require) before their extra's line, as if installed already: that line must resolve
    the extra and find the pinned version satisfied."""
    venv_line, torch_line, tflite_line, scons_line = cmds
    wheel, converted = docs.fixture("wheel"), docs.fixture("converted")
    metadata = zipfile.ZipFile(wheel).read(f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info/METADATA")
    assert metadata.decode().splitlines()[1] == f"Name: {PROJECT['name']}"
    repo = firmware_repository(docs.tmp, converted / "micro_speech.int8.tflite")
    pip = {"PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": f"{wheel.parent} {WHEELHOUSE}",
           "PIP_NO_CACHE_DIR": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    result = docs.run(venv_line.shell(), repo, env=pip)
    assert re.search(rf"^Successfully installed .*\b{PROJECT['name']}-", result.stdout, re.M), result.log
    for line, extra in ((torch_line, "torch"), (tflite_line, "tflite")):
        install_from_here([pin(extra)], repo / ".venv")
        result = docs.run(line.shell(), repo, env=pip)
        assert f"Requirement already satisfied: {pin(extra)}" in result.stdout and "does not provide the extra" not in result.log, result.log

    # Only the virtual environment's commands from here on: its kiln, its scons, its python.
    shell = {"PATH": f"{repo / '.venv/bin'}:/usr/bin:/bin", "HOME": str(docs.tmp), "KILN_WORKERS": "0"}
    new = documented(r"kiln new kws --from path/to/kws\.onnx")
    assert "created models/kws" in docs.run(new.shell(replace={"path/to/kws.onnx": "kws.tflite"}), repo, env=shell).stderr
    build = docs.run(scons_line.shell(), repo, env=shell)
    assert model_stages("gesture") | model_stages("kws") <= build.actions, build.log
    assert {"link build/host/gesture_app", "link build/m4/gesture_app.elf"} <= build.actions, build.log
    assert "site-packages/kiln/runtime" in build.log and str(ROOT) not in build.log, build.log  # the installed Kiln
    results = external_repo.run_commands(docs.tmp, {**os.environ, **shell})
    assert stage_actions(parse_actions(results["scons -j2"].stdout)[0]) == set(), results["scons -j2"].stdout  # built
    external_repo.check_documented_run(repo, results)
    for root in ("build/host", "build/m4"):
        assert re.search(r"^kws +bit-exact", results[f"kiln check {root}"].stdout, re.M), results[f"kiln check {root}"].stdout

    compile_line, run_line = documented(r"kiln compile net\.tflite -o out/"), documented(r"kiln run out/ .*")
    person_detect = edited((converted / "person_detect.int8.tflite").read_bytes(), depthwise_biases_along_dimension_3)
    for name, model in (("person_detect", person_detect), ("conv_stack", (converted / "conv_stack.int8.tflite").read_bytes())):
        cwd = docs.folder(f"compile_{name}")
        (cwd / "net.tflite").write_bytes(model)
        docs.run(compile_line.shell(), cwd, env=shell)
        graph = load(cwd / "out/quantized.kir")
        (shape, dtype), = [(graph.tensors[n].shape, graph.tensors[n].dtype) for n in graph.inputs]
        samples = np.random.default_rng(3).integers(-128, 128, (3, *shape)).astype(dtype)
        np.save(cwd / "x.npy", samples)
        docs.run(run_line.shell(keep={"--raw": True}), cwd, env=shell)
        assert np.array_equal(np.load(cwd / "y.npy"), np.stack([tflm_output(model, s) for s in samples])), name
