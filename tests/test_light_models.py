"""Compile scale: the ONNX "light" models shipped in the onnx package compile through every stage.

AlexNet, DenseNet-121, GoogLeNet (Inception v1) and v2, ResNet-50,
ShuffleNet, SqueezeNet, VGG-19 and ZFNet-512 as onnx/backend/test/data/light
has them: the real graphs with every weight a ConstantOfShape of 0.02. Each
compiles in its own `kiln compile` process (VGG-19 holds 548 MB of float
weights) with one seeded 224x224 calibration sample, and every artifact must
verify at its level; the smallest one's C is built and run bit-exact with
the integer reference. They do not fit a microcontroller; `bench/scale.py`
times them and measures each stage's memory.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from conftest import ROOT
from model_builds import shared_root
from kiln import host
from kiln.check import reference_outputs
from kiln.ir import load
from kiln.ir.verify import verify
from kiln.runio import quantize_inputs

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
MODELS = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet", "vgg19", "zfnet512"]


def test_the_onnx_package_ships_every_light_model() -> None:
    assert sorted(p.stem.removeprefix("light_") for p in LIGHT.glob("light_*.onnx")) == MODELS


@pytest.fixture(scope="module")
def calibration(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("light") / "calib.npy"
    np.save(path, np.random.default_rng(0).standard_normal((1, 1, 3, 224, 224)).astype(np.float32))
    return path


@pytest.mark.parametrize("model", MODELS)
def test_light_model_compiles_through_every_stage(model: str, calibration: Path, tmp_path: Path, tmp_path_factory) -> None:
    out = tmp_path / "out"
    try:
        _compile_and_check(model, calibration, out, shared_root(tmp_path_factory.getbasetemp(), "kiln-objects"))
    finally:
        shutil.rmtree(out, ignore_errors=True)  # VGG-19 leaves 2.3 GB of artifacts, more than a kept test folder should hold


def _compile_and_check(model: str, calibration: Path, out: Path, objects: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "kiln", "compile", str(LIGHT / f"light_{model}.onnx"),
                           "--calibration", str(calibration), "-o", str(out)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    name = f"light_{model}"
    verify(load(out / "imported.kir", "imported"), levels=("source",))
    for level in ("normalized", "quantized", "lowered"):
        verify(load(out / f"{level}.kir", level), levels=("kernel",))
    planned = load(out / "planned.kir", "planned")
    verify(planned, levels=("kernel",))
    assert all(n.attrs.get("kernel") is not None for n in planned.nodes)
    header = (out / f"{name}.h").read_text()
    weights = sum(t.nbytes for t in planned.tensors.values() if t.is_constant and any(t.name in n.inputs for n in planned.nodes))
    assert int(re.search(r"_WEIGHT_BYTES (\d+)u", header).group(1)) == weights
    source = out / f"{name}.c"
    assert source.stat().st_size > 2 * weights  # every weight written out, at least a digit and a comma each
    if model == "squeezenet":
        quantized = load(out / "quantized.kir", "quantized")
        x = np.random.default_rng(1).standard_normal(quantized.tensors[quantized.inputs[0]].shape).astype(np.float32)
        samples = quantize_inputs(quantized, [[x]])
        exe = host.build_executable([source], [host.model_prefix(out / f"{name}.h")], out / "program",
                                    object_cache=objects)
        got, want = host.run_executable(exe, planned, samples), reference_outputs(quantized, samples)
        assert all(np.array_equal(a, b) for a, b in zip(got[0], want[0]))
