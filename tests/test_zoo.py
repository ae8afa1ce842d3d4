"""The model zoo: the four MLPerf Tiny reference architectures, each as a model.py and in one more source form.

For every zoo member: the import matches the source in float (PyTorch eager,
or ONNX's reference evaluator for float ONNX files), the imported graph has
the reference architecture's parameter and multiply-accumulate counts, the
compiled program run by `kiln run` equals the integer reference bit for bit,
and that reference stays within stated bounds of the float model. A QDQ
file's layers also match ONNX's own QDQ semantics within one rounding step
(tests/qdq_oracle.py); the int8 .tflite file's outputs equal TFLite Micro's,
bit for bit. The exported variant files re-generate from their scripts: byte
for byte where the bytes do not depend on the CPU.
"""
from __future__ import annotations

import functools
import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

from conftest import ROOT
from qdq_oracle import DIFFERING, STEPS, layerwise
from kiln import config as model_config
from kiln.check import reference_outputs
from kiln.cli import main as kiln
from kiln.frontends import import_model
from kiln.ir import load
from kiln.ir.graph import Graph
from kiln.reference.executor import run
from kiln.runio import dequantize_outputs, quantize_inputs
from kiln.frontends.torch_module import load_model_py

MODELS = ROOT / "models"
TEST_SEED = 3  # the model.py files use seeds 0-2 for weights, statistics and calibration
SAMPLES = 16


@dataclass(frozen=True)
class Counts:
    """What a reference architecture holds: conv/dense kernel elements, their biases (one per output
    channel), batch-norm entries (scale, shift, mean and variance per channel) and multiply-accumulates."""

    weights: int
    biases: int
    batch_norm: int
    macs: int

    @property
    def keras_params(self) -> int:
        """The parameter total Keras' model.summary() reports for the reference model."""
        return self.weights + self.biases + self.batch_norm


# Counted layer by layer from the MLPerf Tiny Keras reference models (every conv and dense layer has a bias).
REFERENCE = {
    "kws": Counts(weights=22_016, biases=588, batch_norm=2_304, macs=2_656_768),
    "vww": Counts(weights=208_112, biases=2_738, batch_norm=10_944, macs=7_489_664),
    "ic": Counts(weights=77_360, biases=346, batch_norm=960, macs=12_501_632),
    "ad": Counts(weights=264_192, biases=1_672, batch_norm=4_128, macs=264_192),
}
# The rounded figures published for them, each checked within PUBLISHED_TOLERANCE: DS-CNN 2.7 M MACs
# (Hello Edge's DS-CNN-S: 5.4 M operations); MobileNetV1-0.25 at 96x96 208k weights and 7.5 M MACs;
# ResNet-8 78k parameters and 12.5 M MACs; FC-AutoEncoder 270k parameters and 0.264 M MACs.
PUBLISHED = {
    "kws": {"macs": 2.7e6},
    "vww": {"weights": 208e3, "macs": 7.5e6},
    "ic": {"keras_params": 78e3, "macs": 12.5e6},
    "ad": {"keras_params": 270e3, "macs": 0.264e6},
}
PUBLISHED_TOLERANCE = 0.02


@dataclass(frozen=True)
class Member:
    """A zoo folder: its task, the model.py folder it comes from, and what runs its source."""

    name: str
    task: str
    base: str
    runtime: str  # "torch" (model.py or .pt2), "onnx" (float ONNX), "qdq" (QDQ ONNX) or "tflite" (int8 TFLite on TFLM)


ZOO = (
    Member("kws_dscnn", "kws", "kws_dscnn", "torch"),
    Member("vww_mobilenet", "vww", "vww_mobilenet", "torch"),
    Member("ic_resnet8", "ic", "ic_resnet8", "torch"),
    Member("ad_autoencoder", "ad", "ad_autoencoder", "torch"),
    Member("kws_dscnn_onnx", "kws", "kws_dscnn", "onnx"),
    Member("ic_resnet8_pt2", "ic", "ic_resnet8", "torch"),
    Member("vww_mobilenet_qdq", "vww", "vww_mobilenet", "qdq"),
    Member("ad_autoencoder_qdq", "ad", "ad_autoencoder", "qdq"),
    Member("kws_dscnn_tflite", "kws", "kws_dscnn", "tflite"),
)
BY_NAME = {m.name: m for m in ZOO}
# Files each variant's export.py writes.
VARIANTS = {
    "kws_dscnn_onnx": ("model.onnx", "calibration.npy"),
    "ic_resnet8_pt2": ("model.pt2", "calibration.npy"),
    "vww_mobilenet_qdq": ("model.onnx", "calibration.npy"),
    "ad_autoencoder_qdq": ("model.onnx", "calibration.npy"),
    "kws_dscnn_tflite": ("model.tflite", "calibration.npy"),
}
# Files whose bytes depend on the CPU that writes them: onnxruntime calibrates a QDQ file with float32
# kernels chosen by the vector unit, so its activation ranges (and the int32 biases quantized at activation
# scale x weight scale) differ in their last bits between CPU kinds. Differently ordered float32 sums of
# K terms differ by about K·2^-24 relative per layer, far below RANGE_RTOL on these networks; a changed
# model, exporter or quantizer setting moves the parameters by far more.
CPU_DEPENDENT = {("vww_mobilenet_qdq", "model.onnx"), ("ad_autoencoder_qdq", "model.onnx")}
RANGE_RTOL = 1e-3


@dataclass(frozen=True)
class Fidelity:
    """Least agreement of the int8 reference with the float model over SAMPLES held-out inputs.

    Seeded, untrained weights make the classifiers' readouts sensitive (their
    pooled features differ little between inputs), so these bounds are looser
    than a trained model would need; a systematic error (a wrong scale or
    zero point, a misplaced rounding) still breaks them.
    """

    sqnr_db: float
    top1: float | None  # None: not a classifier


FIDELITY = {
    "kws": Fidelity(sqnr_db=14.0, top1=0.8),
    "vww": Fidelity(sqnr_db=9.0, top1=0.75),
    "ic": Fidelity(sqnr_db=20.0, top1=0.9),
    "ad": Fidelity(sqnr_db=30.0, top1=None),
}
# Kiln ops that carry a QDQ file's arithmetic: each must be compared with ONNX's reference (tests/qdq_oracle.py).
QDQ_COMPARED = frozenset({"conv2d", "depthwise_conv2d", "fully_connected", "avg_pool2d", "softmax"})


def load_module(path: Path) -> ModuleType:
    return load_model_py(path, f"zoo_{path.parent.name}_{path.stem}")


@functools.cache
def model_py(folder: str) -> ModuleType:
    return load_module(MODELS / folder / "model.py")


def base_module(member: str) -> ModuleType:
    """The model.py a zoo member comes from."""
    return model_py(BY_NAME[member].base)


def source_path(member: str) -> Path:
    folder = MODELS / member
    return folder / model_config.load(folder / "model.toml")["model"]["source"]


@functools.cache
def imported(member: str) -> Graph:
    """The member's source through the import stage, with its model.toml inputs."""
    folder = MODELS / member
    return import_model(source_path(member), member, model_config.load(folder / "model.toml")["inputs"]).graph


def held_out(member: str) -> np.ndarray:
    """SAMPLES inputs of the member's task, (N, *input_shape), from a seed no model file uses (NHWC for TFLite)."""
    samples = base_module(member).samples(SAMPLES, TEST_SEED)
    return np.ascontiguousarray(samples.transpose(0, 1, 3, 4, 2)) if BY_NAME[member].runtime == "tflite" and samples.ndim == 5 else samples


def source_outputs(member: str, inputs: np.ndarray) -> np.ndarray:
    """The first output for each input: PyTorch for model.py, .pt2 and the float model a QDQ file was
    quantized from; ONNX's reference evaluator (no CPU-specific kernels) for a float ONNX file; TFLite
    Micro (int8) for the .tflite file."""
    m = BY_NAME[member]
    if m.runtime == "tflite":
        from tflite_micro.python.tflite_micro import runtime

        interpreter = runtime.Interpreter.from_bytes(source_path(member).read_bytes(), arena_size=1 << 22)
        outs = []
        for x in inputs:
            interpreter.set_input(x, 0)
            interpreter.invoke()
            outs.append(interpreter.get_output(0))
        return np.stack(outs)
    if m.runtime == "onnx":
        evaluator = ReferenceEvaluator(str(source_path(member)))
        name = evaluator.input_names[0]
        return np.stack([evaluator.run(None, {name: x})[0] for x in inputs])
    path = source_path(member)
    net = torch.export.load(path).module() if path.suffix == ".pt2" else base_module(member).model()
    with torch.no_grad():
        return np.stack([net(torch.from_numpy(x)).numpy() for x in inputs])


def graph_counts(graph: Graph) -> Counts:
    """Kernel, bias and batch-norm entries and MACs of a source-level graph's Conv, Gemm and MatMul nodes
    (of a kernel-level graph's conv2d, depthwise_conv2d and fully_connected nodes)."""
    weights = biases = batch_norm = macs = 0
    for node in graph.nodes:
        if node.op in ("conv2d", "depthwise_conv2d", "fully_connected"):
            w, out = graph.tensors[node.inputs[1]], graph.tensors[node.outputs[0]]
            weights += w.size
            biases += graph.tensors[node.inputs[2]].size if len(node.inputs) > 2 and node.inputs[2] else 0
            macs += out.size * (math.prod(w.shape[1:3]) if node.op == "depthwise_conv2d" else math.prod(w.shape[1:]))
        if node.op in ("Conv", "Gemm", "MatMul"):
            w, out = graph.tensors[node.inputs[1]], graph.tensors[node.outputs[0]]
            assert w.data is not None, f"{node.name}: weights are not a constant"
            weights += w.size
            biases += graph.tensors[node.inputs[2]].size if len(node.inputs) > 2 and node.inputs[2] else 0
            if node.op == "Conv":
                per_output = math.prod(w.shape[1:])
            elif node.op == "Gemm" and node.attrs.get("transA", 0):
                per_output = graph.tensors[node.inputs[0]].shape[0]
            else:
                per_output = graph.tensors[node.inputs[0]].shape[-1]
            macs += out.size * per_output
        elif node.op == "BatchNormalization":
            batch_norm += sum(graph.tensors[i].size for i in node.inputs[1:5])
    return Counts(weights, biases, batch_norm, macs)


def sqnr_db(reference: np.ndarray, test: np.ndarray) -> float:
    return 10.0 * math.log10(float(np.sum(reference.astype(np.float64) ** 2)) / float(np.sum((reference - test) ** 2.0)))


@pytest.mark.parametrize("member", [m.name for m in ZOO if m.runtime not in ("qdq", "tflite")])
def test_float_reference_of_import_matches_source(member):
    graph = imported(member)
    inputs = held_out(member)[:4]
    want = source_outputs(member, inputs)
    got = np.stack([run(graph, {graph.inputs[0]: x})[graph.outputs[0]] for x in inputs])
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * float(np.max(np.abs(want))))


@pytest.mark.parametrize("member", [m.name for m in ZOO])
def test_counts_are_the_reference_architecture(member):
    m = BY_NAME[member]
    graph = imported(member)
    got, ref = graph_counts(graph), REFERENCE[m.task]
    keeps_batch_norm = any(n.op == "BatchNormalization" for n in graph.nodes)
    assert keeps_batch_norm == (m.runtime == "torch")  # the ONNX exports fold batch norm into the layers
    assert (got.weights, got.biases, got.macs) == (ref.weights, ref.biases, ref.macs)
    assert got.batch_norm == (ref.batch_norm if keeps_batch_norm else 0)
    measured = {"weights": got.weights, "macs": got.macs} | ({"keras_params": got.keras_params} if keeps_batch_norm else {})
    for what, figure in PUBLISHED[m.task].items():
        if what in measured:
            assert abs(measured[what] - figure) <= PUBLISHED_TOLERANCE * figure, (what, measured[what], figure)


def assert_same_but_calibration(fresh: Path, committed: Path) -> None:
    """Two QDQ files with the same graph and initializers, but for calibration-derived values within RANGE_RTOL."""
    a, b = onnx.load(str(fresh)), onnx.load(str(committed))
    values = [{t.name: numpy_helper.to_array(t) for t in m.graph.initializer} for m in (a, b)]
    for m in (a, b):
        for t in m.graph.initializer:
            t.CopyFrom(onnx.TensorProto(name=t.name, dims=t.dims, data_type=t.data_type))
    assert a.SerializeToString() == b.SerializeToString(), f"{committed}: the graph differs from what export.py writes"
    for name, new in values[0].items():
        old = values[1][name]
        assert new.dtype == old.dtype and new.shape == old.shape, name
        wide_new, wide_old = new.astype(np.float64), old.astype(np.float64)
        # zero points and int32 biases round a slightly changed range to a neighbour at worst; int8 weights stay
        slack = 1.0 if new.dtype == np.int32 or (new.dtype.kind in "iu" and new.ndim == 0) else 0.0
        assert np.all(np.abs(wide_new - wide_old) <= slack + RANGE_RTOL * np.abs(wide_old)), name


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_variant_files_regenerate(variant, tmp_path):
    folder = MODELS / variant
    command = [sys.executable, str(folder / "export.py"), "--out", str(tmp_path)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(VARIANTS[variant])
    for name in VARIANTS[variant]:
        if (variant, name) in CPU_DEPENDENT:
            assert_same_but_calibration(tmp_path / name, folder / name)
        else:
            stale = f"models/{variant}/{name} differs from what export.py writes: re-run it"
            assert (tmp_path / name).read_bytes() == (folder / name).read_bytes(), stale


@pytest.mark.parametrize("member", [m.name for m in ZOO])
def test_kiln_run_matches_int8_reference_and_tracks_source(member, compiled, tmp_path):
    out = compiled(member)
    quantized = load(out / "quantized.kir")
    floats = held_out(member)
    raw = quantize_inputs(quantized, [[x] for x in floats])
    np.save(tmp_path / "x.npy", np.stack([r[0] for r in raw]))
    assert kiln(["run", str(out), "--raw", "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npy")]) == 0
    got = np.load(tmp_path / "y.npy")
    want = np.stack([r[0] for r in reference_outputs(quantized, raw)])
    assert got.dtype == want.dtype == np.int8 and np.array_equal(got, want)

    m = BY_NAME[member]
    if m.runtime == "tflite":  # the int8 file on TFLite Micro: the generated C gives its bytes
        assert np.array_equal(got, source_outputs(member, [r[0] for r in raw]))
        return
    result = np.stack([d[0] for d in dequantize_outputs(quantized, [[g] for g in got])])
    source = source_outputs(member, floats)
    bound = FIDELITY[m.task]
    assert sqnr_db(source, result) >= bound.sqnr_db
    if bound.top1 is not None:
        top1 = np.mean(np.argmax(source.reshape(SAMPLES, -1), 1) == np.argmax(result.reshape(SAMPLES, -1), 1))
        assert top1 >= bound.top1


@pytest.mark.parametrize("member", [m.name for m in ZOO if m.runtime == "qdq"])
def test_qdq_layers_match_onnx_reference_semantics(member, compiled):
    """Each layer of a QDQ member, on the ONNX reference's own int8 inputs, within one rounding step of it."""
    quantized = load(compiled(member) / "quantized.kir")
    layers = [layer for x in held_out(member)[:4] for layer in layerwise(source_path(member), quantized, {quantized.inputs[0]: x})]
    assert {n.name for n in quantized.nodes if n.op in QDQ_COMPARED} <= {layer.node for layer in layers}
    worst = max(layers, key=lambda layer: layer.steps.max())
    assert worst.steps.max() <= STEPS, (worst.node, worst.op, worst.steps.max())
    on_grid = np.concatenate([layer.steps.ravel() for layer in layers if layer.on_grid])
    assert np.mean(on_grid != 0) <= DIFFERING, np.mean(on_grid != 0)
