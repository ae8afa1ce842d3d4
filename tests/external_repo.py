"""examples/external_repo as docs/build.md shows it: its SConstruct and its commands, taken from the page.

Shared by `tests/test_scons_misc.py` (this checkout's Kiln) and
`tests/test_package.py` (the wheel in a fresh virtual environment): both lay
the example out as `examples/external_repo/` in a folder of their own, give
it the SConstruct the page shows, and run the page's commands there, in
order, as a shell would (`cd` included).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from conftest import ROOT
from doc_commands import block_commands
from kiln.check import reference_outputs
from kiln.ir import load

DOC = ROOT / "docs/build.md"
EXAMPLE = ROOT / "examples/external_repo"


def _block(heading: str, language: str) -> str:
    """The first fenced block of `language` ("" for a plain one) after `heading` in docs/build.md."""
    text = DOC.read_text()
    after = text[text.index(f"\n{heading}\n"):]
    return re.search(rf"^```{language}\n(.*?)^```$", after, re.M | re.S)[1]


def doc_sconstruct() -> str:
    return _block("### A firmware repository's SConstruct", "python")


def doc_commands() -> list[str]:
    """The command lines of "Building, running and checking it", as typed (after `$ `, without their comments)."""
    return [text for _, text in block_commands("", _block("### Building, running and checking it", "").splitlines())]


def lay_out(base: Path, models: Path | None = None) -> Path:
    """`base/examples/external_repo`: the example with the page's SConstruct (and `models` instead of its own)."""
    repo = Path(shutil.copytree(EXAMPLE, base / "examples/external_repo", ignore=shutil.ignore_patterns("build", ".sconsign*")))
    (repo / "SConstruct").write_text(doc_sconstruct())
    if models is not None:
        shutil.rmtree(repo / "models")
        shutil.copytree(models, repo / "models")
    return repo


def documented_env(home: Path) -> dict[str, str]:
    """The shell the page's commands run in: this checkout's environment (its scons and kiln) first on PATH; fresh
    stage processes, as in the rest of the suite (a warm worker would outlive the test)."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "HOME": str(home),
            "KILN_WORKERS": "0"}


def run_commands(base: Path, env: dict[str, str]) -> dict[str, subprocess.CompletedProcess]:
    """Run the page's commands from `base`, each through the shell; `cd` moves the later ones. Each must succeed."""
    cwd, results = base, {}
    for command in doc_commands():
        if command.startswith("cd "):
            cwd = cwd / command.split()[1]
            continue
        proc = subprocess.run(command, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, f"{command!r} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        results[command] = proc
    return results


def scores(output: str) -> list[int]:
    return [int(v) for v in re.search(r"^scores:(.*)$", output, re.M)[1].split()]


def reference_scores(repo: Path) -> list[int]:
    """What main.c prints for its fixed input, from the integer reference on the build's quantized graph."""
    quantized = load(repo / "build/host/gesture/quantized.kir")
    shape = quantized.tensors[quantized.inputs[0]].shape
    sample = ((np.arange(int(np.prod(shape))) * 37) % 256 - 128).astype(np.int8).reshape(shape)
    return reference_outputs(quantized, [[sample]])[0][0].ravel().tolist()


def check_documented_run(repo: Path, results: dict[str, subprocess.CompletedProcess]) -> None:
    """The apps print the reference's scores on the host and under QEMU, each model's own programs check bit-exact
    in both roots, the report has the Cortex-M4 image's per-layer counts, and the build warned of nothing."""
    want = reference_scores(repo)
    host = results["./build/host/gesture_app"].stdout
    assert scores(host) == want and f"class: {int(np.argmax(want))}" in host, host
    assert results["kiln qemu build/m4/gesture_app.elf"].stdout == host
    for root in ("build/host", "build/m4"):
        out = results[f"kiln check {root}"].stdout
        assert re.search(r"^gesture +bit-exact \(10/10\)", out, re.M), out
    build = results["scons -j2"]
    assert "warning" not in (build.stdout + build.stderr).lower(), build.stdout + build.stderr
    page = (repo / "build/host/report.html").read_text()
    assert "m4/gesture/gesture.elf under QEMU" in page
