"""Every file Kiln writes is created as a compiler's outputs are: mode 0666 less the umask.

Atomic writes go through a temporary file, which must not leave artifacts,
sources, reports or cache entries private to their owner (0600) when the
umask allows others to read them, nor open them up when it does not.
"""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from onnx_models import qdq_source_model


def run(cmd: list[str], cwd: Path, umask: int) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, preexec_fn=lambda: os.umask(umask))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def modes(folder: Path) -> dict[str, int]:
    return {p.relative_to(folder).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in folder.rglob("*") if p.is_file()}


def onnx_model(folder: Path) -> Path:
    """A float ONNX model folder with a calibration file: the whole chain without loading torch."""
    folder.mkdir(parents=True)
    onnx.save(qdq_source_model(), folder / "model.onnx")
    np.save(folder / "calibration.npy", np.random.default_rng(1).standard_normal((8, 1, 3, 16, 16)).astype(np.float32))
    (folder / "model.toml").write_text('[model]\nsource = "model.onnx"\n\n[quant]\ncalibration = ["calibration.npy"]\n')
    return folder


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_compile_and_reports_follow_the_umask(tmp_path, umask):
    model = onnx_model(tmp_path / "models" / "net")
    out = tmp_path / "root" / "net"
    run([sys.executable, "-m", "kiln", "compile", str(model), "-o", str(out)], tmp_path, umask)
    run([sys.executable, "-m", "kiln", "report", str(out), "--json", str(out / "report.json")], tmp_path, umask)
    run([sys.executable, "-m", "kiln", "build-report", "root", "-o", "root/report.html"], tmp_path, umask)
    found = modes(tmp_path / "root")
    assert {"net/planned.kir", "net/net.c", "net/samples.npz", "net/report.json", "report.html"} <= set(found)
    assert all(mode == 0o666 & ~umask for mode in found.values()), found


def test_scons_build_and_cache_are_readable_under_umask_022(make_repo):
    repo = make_repo(())
    onnx_model(repo / "models" / "net")
    run([sys.executable, "-m", "SCons", "-Q", "--kiln-cache=cache", "net"], repo, 0o022)
    for folder in (repo / "build", repo / "cache"):
        found = modes(folder)
        assert found and all(mode & 0o044 == 0o044 and not mode & 0o022 for mode in found.values()), found
    assert modes(repo / "build/host/net")["net"] & 0o111 == 0o111, "the program stays executable"
