"""`kiln check`: current programs are checked bit for bit; a partial or missing build is named as such,
never reported as a compiler mismatch."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import scons


def check(repo: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kiln", "check", "build/host"], cwd=repo, capture_output=True, text=True)


def row(output: str, model: str) -> str:
    return next(line for line in output.splitlines() if line.startswith(f"{model} "))


def test_check_names_out_of_date_and_unbuilt_models(make_repo):
    repo = make_repo(("tiny_cnn", "tiny_resnet"))
    scons(repo, "-j2", "tiny_cnn")
    scons(repo, "tiny_resnet-quantize")
    proc = check(repo)
    assert proc.returncode == 1 and "MISMATCH" not in proc.stdout, proc.stdout
    assert row(proc.stdout, "tiny_cnn").split()[1:3] == ["bit-exact", "(10/10)"], proc.stdout
    assert "from the model's calibration_data()" in row(proc.stdout, "tiny_cnn")
    assert "NOT BUILT" in row(proc.stdout, "tiny_resnet")
    assert "tiny_resnet: not built: no program (run `scons tiny_resnet`)" in proc.stdout

    toml = repo / "models/tiny_cnn/model.toml"
    toml.write_text(toml.read_text().replace('observer = "minmax"', 'observer = "percentile"'))
    scons(repo, "tiny_cnn-quantize")
    proc = check(repo)
    assert proc.returncode == 1 and "MISMATCH" not in proc.stdout, proc.stdout
    assert "OUT OF DATE" in row(proc.stdout, "tiny_cnn")
    assert ("tiny_cnn: out of date: quantized.kir changed since the program was built (run `scons tiny_cnn`)"
            in proc.stdout), proc.stdout

    scons(repo, "-j2")
    proc = check(repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert all(row(proc.stdout, m).split()[1] == "bit-exact" for m in ("tiny_cnn", "tiny_resnet")), proc.stdout
