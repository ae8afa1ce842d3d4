"""Bad input: one line on stderr naming the file/operator and the reason, a non-zero exit, nothing half-written."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT


def kiln(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kiln", *args], capture_output=True, text=True, cwd=cwd)


def assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kiln: error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.fixture
def model_dir(tmp_path):
    d = tmp_path / "tiny_cnn"
    shutil.copytree(ROOT / "models/tiny_cnn", d, ignore=shutil.ignore_patterns("__pycache__"))
    return d


def test_unknown_config_key_names_file_key_and_closest(model_dir, tmp_path):
    (model_dir / "model.toml").write_text("[quant]\nobserverr = 'minmax'\n")
    out = tmp_path / "out"
    proc = kiln("compile", str(model_dir), "-o", str(out))
    assert_one_line_error(proc, "model.toml", "quant.observerr", "did you mean 'quant.observer'")
    assert not out.exists() or not any(out.iterdir())


def test_raising_model_py_names_the_file(model_dir, tmp_path):
    (model_dir / "model.py").write_text("raise RuntimeError('weights missing')\n")
    out = tmp_path / "out"
    proc = kiln("compile", str(model_dir), "-o", str(out))
    assert_one_line_error(proc, "model.py", "weights missing")
    assert not any(out.glob("*.kir"))


def test_unsupported_op_names_node_and_type(model_dir, tmp_path):
    (model_dir / "model.py").write_text(
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return torch.cumsum(x, dim=1)\n"
        "def model():\n    return M().eval()\n"
        "def example_inputs():\n    return (torch.ones(1, 4),)\n"
    )
    proc = kiln("compile", str(model_dir), "-o", str(tmp_path / "out"))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "cumsum" in proc.stderr and "model.py: return torch.cumsum(x, dim=1)" in proc.stderr


def test_inspect_refuses_truncated_and_foreign_files(tmp_path):
    out = tmp_path / "out"
    assert kiln("compile", str(ROOT / "models/tiny_cnn"), "-o", str(out)).returncode == 0
    good = (out / "planned.kir").read_bytes()
    (tmp_path / "cut.kir").write_bytes(good[: len(good) // 2])
    assert_one_line_error(kiln("inspect", str(tmp_path / "cut.kir")), "cut.kir", "truncated")
    (tmp_path / "model.tflite").write_bytes(b"\x18\x00\x00\x00TFL3" + bytes(40))
    assert_one_line_error(kiln("inspect", str(tmp_path / "model.tflite")), "model.tflite", "not a .kir file")
    assert_one_line_error(kiln("inspect", str(tmp_path / "missing.kir")), "missing.kir", "cannot read")
    proc = kiln("inspect", str(out / "planned.kir"))
    assert proc.returncode == 0 and "conv2d" in proc.stdout and "@arena+" in proc.stdout
    proc = kiln("inspect", "--json", str(out / "planned.kir"))
    assert proc.returncode == 0 and '"arena_size"' in proc.stdout
