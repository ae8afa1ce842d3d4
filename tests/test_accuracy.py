"""Accuracy users can rely on: per-model int8 SQNR floors, and digits_cnn's generated C on held-out data."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import ROOT
from test_digits import digits_module, float_predictions
from kiln import host
from kiln.ir import load
from kiln.quantize.kept import load_samples, report_inputs
from kiln.quantize.report import report
from kiln.runio import quantize_inputs

# Output SQNR (dB) of the int8 model against float on the 16 calibration samples its build keeps (as `kiln
# report` measures it; the QDQ files' on the samples onnxruntime calibrated them with); the
# floor sits a few dB under what the model measures, so a regression in any stage fails.
# The zoo's weights are seeded, not trained, so its deep models measure lower than trained ones would.
SQNR_FLOOR_DB = {
    "ad_autoencoder": 33.0,
    "ad_autoencoder_qdq": 39.0,
    "digits_cnn": 35.0,
    "ic_resnet8": 27.0,
    "ic_resnet8_pt2": 27.0,
    "kws_dscnn": 16.0,
    "kws_dscnn_onnx": 16.0,
    "tiny_cnn": 40.0,
    "tiny_resnet": 45.0,
    "vww_mobilenet": 11.0,
    "vww_mobilenet_qdq": 13.0,
}

# Quantized .tflite sources have no float graph to measure against: their bar is TFLite Micro's
# output, bit for bit (tests/test_zoo.py).
TFLM_EXACT = {"kws_dscnn_tflite"}


@pytest.mark.parametrize("model", sorted(SQNR_FLOOR_DB))
def test_output_sqnr_floor(compiled, model):
    out = compiled(model)
    normalized, quantized = load(out / "normalized.kir"), load(out / "quantized.kir")
    rep = report(normalized, quantized, *report_inputs(normalized, load_samples(out), 16))
    sqnr = rep["outputs"][quantized.outputs[0]]
    assert sqnr is None or sqnr >= SQNR_FLOOR_DB[model], f"{model}: output SQNR {sqnr:.2f} dB < floor {SQNR_FLOOR_DB[model]} dB"


def test_every_model_has_a_floor():
    models = {p.parent.name for p in (ROOT / "models").glob("*/model.toml")}
    assert models <= set(SQNR_FLOOR_DB) | TFLM_EXACT, f"state an SQNR floor for {sorted(models - set(SQNR_FLOOR_DB) - TFLM_EXACT)}"


def test_digits_generated_c_accuracy_within_one_point_of_float(compiled):
    out = compiled("digits_cnn")
    quantized, planned = load(out / "quantized.kir"), load(out / "planned.kir")
    images, labels = digits_module().test_data()
    float_acc = float(np.mean(float_predictions(images) == labels))
    exe = host.build_executable([out / "digits_cnn.c"], [host.model_prefix(out / "digits_cnn.h")], out / "host_model")
    shape = quantized.tensors[quantized.inputs[0]].shape
    raw = quantize_inputs(quantized, [[img.reshape(shape)] for img in images])
    logits = host.run_executable(exe, planned, raw)
    c_acc = float(np.mean(np.array([int(np.argmax(o[0])) for o in logits]) == labels))
    assert float_acc >= 0.97
    assert c_acc >= float_acc - 0.01, f"generated C {c_acc:.4f} vs float {float_acc:.4f}"
