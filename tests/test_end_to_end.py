"""Every model in models/: compiled, built with strict flags and sanitizers, run bit-exact with the reference."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import ROOT
from kiln import host
from kiln.check import reference_outputs, seeded_inputs
from kiln.cli import main as kiln
from kiln.frontends.torch_module import load_model_py
from kiln.ir import load
from kiln.ir.verify import verify
from kiln.runio import dequantize_outputs, quantize_inputs

MODELS = sorted(p.parent.name for p in (ROOT / "models").glob("*/model.toml"))
SKELETON_MODELS = ["digits_cnn", "tiny_cnn", "tiny_resnet"]


@pytest.mark.parametrize("model", MODELS)
def test_every_stage_output_verifies(compiled, model):
    out = compiled(model)
    imported = load(out / "imported.kir")
    verify(imported, levels=("kernel",) if "tflite" in imported.meta else ("source",))  # a .tflite file imports as kernel ops
    for artifact in ("normalized", "quantized", "lowered", "planned"):
        verify(load(out / f"{artifact}.kir"), levels=("kernel",))


def sanitized_program(out: Path, model: str) -> Path:
    source = out / f"{model}.c"
    return host.build_executable([source], [host.model_prefix(source.with_suffix(".h"))], out / "asan_model", sanitize=True)


@pytest.mark.parametrize("model", MODELS)
def test_generated_c_is_bit_exact_with_reference_under_sanitizers(compiled, calibration, model):
    out = compiled(model)
    quantized, planned = load(out / "quantized.kir"), load(out / "planned.kir")
    samples = quantize_inputs(quantized, seeded_inputs(quantized, calibration(model), count=12))
    got = host.run_executable(sanitized_program(out, model), planned, samples)
    want = reference_outputs(quantized, samples)
    for i, (g, w) in enumerate(zip(got, want)):
        for a, b in zip(g, w):
            assert a.dtype == b.dtype and np.array_equal(a, b), f"sample {i}: C {a.ravel()[:8]} != reference {b.ravel()[:8]}"


def zoo_module(model: str):
    """A zoo model's model.py, loaded as the import stage loads it."""
    return load_model_py(ROOT / "models" / model / "model.py")


@pytest.mark.parametrize("model", SKELETON_MODELS)
def test_int8_output_is_close_to_pytorch_float(compiled, calibration, model):
    """Bound: every dequantized output within 3 output quantization steps + 5% of the output range of float PyTorch.

    (Deeper models are held to per-model SQNR floors instead, in test_accuracy.py.)
    """
    out = compiled(model)
    quantized, planned = load(out / "quantized.kir"), load(out / "planned.kir")
    floats = seeded_inputs(quantized, calibration(model), count=10)
    exe = host.build_executable([out / f"{model}.c"], [host.model_prefix(out / f"{model}.h")], out / "host_model")
    got = dequantize_outputs(planned, host.run_executable(exe, planned, quantize_inputs(quantized, floats)))
    module = zoo_module(model)
    net = module.model().eval()
    for sample, result in zip(floats, got):
        with torch.no_grad():
            ref = net(*[torch.from_numpy(np.asarray(a, np.float32)) for a in sample])
        ref = ref.numpy() if isinstance(ref, torch.Tensor) else ref[0].numpy()
        step = quantized.tensors[quantized.outputs[0]].quant.scale[0]
        bound = 3 * step + 0.05 * float(np.ptp(ref) or 1.0)
        assert np.max(np.abs(result[0] - ref)) <= bound


def test_strict_warning_flags_compile_every_generated_file(compiled):
    for model in MODELS:
        out = compiled(model)
        proc = subprocess.run(["gcc", *host.STRICT_FLAGS, "-I", str(host.RUNTIME), "-I", str(out), "-c", str(out / f"{model}.c"), "-o", str(out / "strict.o")],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr


def test_kiln_run_round_trip(compiled, tmp_path):
    out = compiled("tiny_cnn")
    quantized = load(out / "quantized.kir")
    x = np.stack([s[0] for s in seeded_inputs(quantized, None, count=3, seed=7)])
    np.save(tmp_path / "x.npy", x)
    assert kiln(["run", str(out), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npy")]) == 0
    y = np.load(tmp_path / "y.npy")
    assert y.shape == (3,) + quantized.tensors[quantized.outputs[0]].shape and y.dtype == np.float32
    np.save(tmp_path / "x1.npy", x[1])
    assert kiln(["run", str(out), "--input", str(tmp_path / "x1.npy"), "--output", str(tmp_path / "y1.npy")]) == 0
    assert np.array_equal(np.load(tmp_path / "y1.npy"), y[1])
    raw = quantize_inputs(quantized, [[x[1]]])[0][0]
    np.save(tmp_path / "r.npy", raw)
    assert kiln(["run", str(out), "--raw", "--input", str(tmp_path / "r.npy"), "--output", str(tmp_path / "r_out.npy")]) == 0
    assert np.array_equal(np.load(tmp_path / "r_out.npy"), reference_outputs(quantized, [[raw]])[0][0])


def test_nhwc_interface_computes_what_the_source_layout_does(compiled, calibration, tmp_path):
    """normalize.input_layout = "NHWC": the model takes NHWC data (calibration samples are transposed for it)."""
    model = "tiny_resnet"
    folder = tmp_path / model
    shutil.copytree(ROOT / "models" / model, folder, ignore=shutil.ignore_patterns("__pycache__"))
    with open(folder / "model.toml", "a") as f:
        f.write('\n[normalize]\ninput_layout = "NHWC"\n')
    nhwc_out = tmp_path / "out"
    assert kiln(["compile", str(folder), "-o", str(nhwc_out)]) == 0
    source_out = compiled(model)
    planned_nchw, planned_nhwc = load(source_out / "planned.kir"), load(nhwc_out / "planned.kir")
    x = planned_nchw.inputs[0]
    assert planned_nhwc.tensors[x].shape == tuple(np.array(planned_nchw.tensors[x].shape)[[0, 2, 3, 1]])
    floats = seeded_inputs(load(source_out / "quantized.kir"), calibration(model), count=6)
    runs = []
    for out, samples in ((source_out, floats), (nhwc_out, [[np.transpose(s[0], (0, 2, 3, 1))] for s in floats])):
        quantized = load(out / "quantized.kir")
        exe = host.build_executable([out / f"{model}.c"], [host.model_prefix(out / f"{model}.h")], out / "host_model")
        runs.append(host.run_executable(exe, load(out / "planned.kir"), quantize_inputs(quantized, samples)))
    for a, b in zip(*runs):
        assert np.array_equal(a[0], b[0])
