"""Reports measure on the samples a model was calibrated with, wherever they run, and say what they measured on.

`kiln report` and `kiln build-report` read the samples the quantize stage
keeps in the build folder (`samples.npz`), so running them from another
working directory changes nothing, and both measure on all of them unless told
fewer, so they give the same figures; a build without samples is measured on
seeded noise, and both say so.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx

from onnx_models import qdq_source_model, quantize_qdq
from kiln.ir import load
from kiln.quantize.kept import KEPT
from kiln.quantize.report import report

NOISE = "seeded random inputs (the build keeps no calibration samples)"


def kiln(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "kiln", *args], cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_reports_use_the_calibration_file_from_any_folder(tmp_path):
    onnx.save(qdq_source_model(), tmp_path / "net.onnx")
    rng = np.random.default_rng(5)
    calibration = (rng.standard_normal((KEPT + 4, 1, 3, 16, 16)) * 2 + 0.5).astype(np.float32)
    np.save(tmp_path / "c.npy", calibration)
    out = tmp_path / "root" / "net"
    kiln(tmp_path, "compile", "net.onnx", "--calibration", "c.npy", "-o", str(out))

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    kiln(out, "report", ".", "--json", str(tmp_path / "inside.json"))
    printed = kiln(elsewhere, "report", str(out), "--json", str(tmp_path / "outside.json")).stdout
    inside, outside = (json.loads((tmp_path / f).read_text()) for f in ("inside.json", "outside.json"))
    assert inside == outside
    assert outside["inputs"] == f"{KEPT} calibration samples (from quant.calibration c.npy)"
    assert outside["inputs"] in printed
    normalized, quantized = load(out / "normalized.kir"), load(out / "quantized.kir")
    want = report(normalized, quantized, {"x": calibration[:KEPT]})
    assert outside["outputs"] == want["outputs"] and outside["top1_agreement"] == want["top1_agreement"]

    # The build report measures as `kiln report` does by default: on every kept sample, to the same figure.
    kiln(elsewhere, "build-report", str(tmp_path / "root"), "-o", "page.html")
    page = (elsewhere / "page.html").read_text()
    assert f'<td class="inputs">{KEPT} calibration samples (from quant.calibration c.npy)</td>' in page
    assert f'<td class="n">{outside["outputs"]["probs"]:.2f}</td>' in page
    kiln(elsewhere, "build-report", str(tmp_path / "root"), "-o", "eight.html", "--samples", "8")
    kiln(out, "report", ".", "--samples", "8", "--json", str(tmp_path / "eight.json"))
    eight = json.loads((tmp_path / "eight.json").read_text())
    assert f'<td class="n">{eight["outputs"]["probs"]:.2f}</td>' in (elsewhere / "eight.html").read_text()
    assert eight["outputs"] != outside["outputs"]  # so the figures above tell the sample counts apart


def test_a_build_without_samples_says_it_measured_noise(tmp_path):
    quantize_qdq(tmp_path / "qdq.onnx", "QInt8")
    out = tmp_path / "root" / "qdq"
    kiln(tmp_path, "compile", "qdq.onnx", "-o", str(out))
    printed = kiln(tmp_path, "report", str(out), "--samples", "4").stdout
    assert f"over 4 {NOISE}" in printed
    assert f"over {KEPT} {NOISE}" in kiln(tmp_path, "report", str(out)).stdout
    kiln(tmp_path, "build-report", str(tmp_path / "root"), "-o", "page.html")
    assert f'<td class="inputs">{KEPT} {NOISE}</td>' in (tmp_path / "page.html").read_text()  # both reports' default
