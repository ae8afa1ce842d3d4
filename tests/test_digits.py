"""The digits CNN, a real-data model: float accuracy, int8 reference accuracy, retraining reaches the same accuracy.

`digits_pipeline()` and `int8_predictions()` are meant for reuse by other
tests (for instance the generated-C accuracy check).
"""
from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import torch

from kiln.frontends import import_model
from kiln.ir.graph import Graph
from kiln.ir.verify import verify
from kiln.normalize import normalize
from kiln.normalize.config import CONFIG as NORMALIZE_CONFIG
from kiln.quantize import quantize
from kiln.quantize.config import CONFIG as QUANT_CONFIG
from kiln.quantize.report import report, run_quantized
from kiln.frontends.torch_module import load_model_py

MODEL_DIR = Path(__file__).resolve().parent.parent / "models" / "digits_cnn"


@functools.cache
def digits_module() -> ModuleType:
    """models/digits_cnn/model.py, loaded by path."""
    return load_model_py(MODEL_DIR / "model.py", "digits_cnn_model")


@functools.cache
def digits_pipeline() -> tuple[Graph, Graph]:
    """(normalized float graph, int8 graph) of digits_cnn with default settings, via import, normalize and quantize."""
    imported = import_model(MODEL_DIR / "model.py", "digits_cnn", {})
    normalized = normalize(imported.graph, {k: v.default for k, v in NORMALIZE_CONFIG.items()})
    quantized = quantize(normalized, {k: v.default for k, v in QUANT_CONFIG.items()}, imported.calibration)
    return normalized, quantized


def int8_predictions(quantized: Graph, images: np.ndarray) -> np.ndarray:
    """Top-1 class of every image (N, *input_shape) by the integer reference executor."""
    name = quantized.inputs[0]
    return np.array([int(np.argmax(run_quantized(quantized, {name: img})[quantized.outputs[0]])) for img in images])


def float_predictions(images: np.ndarray) -> np.ndarray:
    """Top-1 class of every image by the PyTorch model."""
    with torch.no_grad():
        return digits_module().model()(torch.from_numpy(images.reshape(-1, 1, 8, 8))).argmax(dim=1).numpy()


def test_split_is_fixed_and_disjoint():
    m = digits_module()
    calib, (test_x, test_y) = m.calibration_data(), m.test_data()
    assert calib.shape == (1437, 1, 1, 8, 8) and test_x.shape == (360, 1, 1, 8, 8) and test_y.shape == (360,)
    assert np.bincount(test_y).min() >= 35  # stratified: every digit is tested
    train_rows = {row.tobytes() for row in calib.reshape(len(calib), -1)}
    assert not any(row.tobytes() in train_rows for row in test_x.reshape(len(test_x), -1))


def test_float_accuracy():
    test_x, test_y = digits_module().test_data()
    assert np.mean(float_predictions(test_x) == test_y) >= 0.97


def test_int8_reference_accuracy_within_one_point():
    normalized, quantized = digits_pipeline()
    verify(quantized, levels=("kernel",))
    test_x, test_y = digits_module().test_data()
    float_acc = np.mean(float_predictions(test_x) == test_y)
    int8_acc = np.mean(int8_predictions(quantized, test_x) == test_y)
    assert int8_acc >= float_acc - 0.01, (float_acc, int8_acc)


def test_report_on_held_out_images():
    normalized, quantized = digits_pipeline()
    test_x, _ = digits_module().test_data()
    rep = report(normalized, quantized, {normalized.inputs[0]: test_x[:120]})
    (sqnr,) = rep["outputs"].values()
    assert sqnr > 25.0 and rep["top1_agreement"] >= 0.97
    assert all(e["sqnr_db"] > 25.0 for e in rep["tensors"].values())


def accuracy(net: torch.nn.Module, images: np.ndarray, labels: np.ndarray) -> float:
    with torch.no_grad():
        return float(np.mean(net(torch.from_numpy(images.reshape(-1, 1, 8, 8))).argmax(dim=1).numpy() == labels))


def test_retraining_reaches_the_committed_accuracy(tmp_path):
    """train.py re-creates weights.npz byte for byte only on the same kind of CPU (float training rounds
    differently with other vector units); on any CPU a retrained network is as good as the committed one."""
    subprocess.run([sys.executable, str(MODEL_DIR / "train.py"), "--out", str(tmp_path)], check=True, timeout=300)
    m = digits_module()
    test_x, test_y = m.test_data()
    retrained = m.DigitsCNN()
    with np.load(tmp_path / "weights.npz") as saved:
        retrained.load_state_dict({k: torch.from_numpy(saved[k].copy()) for k in saved.files})
    committed, fresh = accuracy(m.model(), test_x, test_y), accuracy(retrained.eval(), test_x, test_y)
    assert fresh >= 0.97 and abs(fresh - committed) <= 0.01, (committed, fresh)


def test_the_build_uses_the_committed_weights():
    imported = import_model(MODEL_DIR / "model.py", "digits_cnn", {}).graph
    constants = [t.data for t in imported.tensors.values() if t.data is not None]
    with np.load(MODEL_DIR / "weights.npz") as saved:
        for name in saved.files:
            assert any(c.dtype == saved[name].dtype and np.array_equal(c, saved[name]) for c in constants), name
