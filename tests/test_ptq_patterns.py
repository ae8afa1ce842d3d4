"""The quantization pattern suite: Kiln's PTQ never does worse than onnxruntime's quantize_static.

For every pattern of bench/ptq_patterns.py (a small float model with a pattern
real networks contain) Kiln's int8 output SQNR against the float model (integer
reference executor, default minmax observer) must reach onnxruntime's QDQ
model's (same float model and calibration samples, evaluated with
onnx.reference.ReferenceEvaluator) minus 1 dB, and every int8 tensor's range
must cover the float values it held during calibration. onnxruntime's QDQ file
depends on its float32 calibration kernels, which differ between CPUs in the
last bits of a range; that moves its SQNR by hundredths of a dB, far inside
the margin. `python bench/ptq.py` prints the numbers.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from conftest import ROOT
from test_quantize import assert_ranges_cover

sys.path.insert(0, str(ROOT / "bench"))
import ptq  # noqa: E402
from ptq_patterns import PATTERNS  # noqa: E402

MARGIN_DB = 1.0


def test_the_suite_covers_the_patterns() -> None:
    assert len(PATTERNS) >= 25 and len({p.name for p in PATTERNS}) == len(PATTERNS)


@pytest.mark.parametrize("pattern", PATTERNS, ids=[p.name for p in PATTERNS])
def test_kiln_ptq_within_a_db_of_onnxruntime(pattern, tmp_path: Path) -> None:
    row = ptq.measure(pattern, tmp_path)
    kiln, ort = row["kiln"]["minmax"], row["onnxruntime"]["MinMax"]
    assert ort > 10.0, f"{pattern.name}: onnxruntime's model is degenerate ({ort:.1f} dB)"
    assert kiln >= ort - MARGIN_DB, f"{pattern.name}: Kiln {kiln:.2f} dB < onnxruntime {ort:.2f} dB - {MARGIN_DB} dB"


@pytest.mark.parametrize("pattern", PATTERNS, ids=[p.name for p in PATTERNS])
def test_every_range_covers_its_calibrated_values(pattern, tmp_path: Path) -> None:
    source = tmp_path / f"{pattern.name}.onnx"
    onnx.save(pattern.build(), str(source))
    calibration, _ = ptq.data(pattern)
    graph = ptq.kiln_graph(source, pattern.name)
    quantized = ptq.kiln_quantized(graph, calibration, "minmax")
    assert_ranges_cover(graph, quantized, {k: v.reshape(len(v), *graph.tensors[k].shape) for k, v in calibration.items()})


# Patterns whose kernels are newest (products of activations, layer norm, a global pool with its own
# output grid, a requantized concat input, several inputs, a 6-D depth-to-space): their generated C against the reference.
C_PATTERNS = ("attention", "layer_norm", "squeeze_excite", "concat_three_inputs", "lstm_cell", "channel_shuffle", "upconv_concat")


@pytest.mark.parametrize("name", C_PATTERNS)
def test_generated_c_is_bit_exact_under_sanitizers(name: str, tmp_path: Path, tmp_path_factory) -> None:
    from model_builds import shared_root
    from kiln import host
    from kiln.check import reference_outputs
    from kiln.cli import resolve_source
    from kiln.ir import load
    from kiln.runio import quantize_inputs
    from kiln.runner import run_stage
    from kiln.stages import STAGES

    pattern = ptq.BY_NAME[name]
    source = tmp_path / f"{name}.onnx"
    onnx.save(pattern.build(), str(source))
    calibration, test = ptq.data(pattern)
    np.savez(tmp_path / "calibration_samples.npz", **calibration)
    model, folder, cfg = resolve_source(source, None)
    cfg["quant"]["calibration"] = [str(tmp_path / "calibration_samples.npz")]
    for stage in STAGES:
        run_stage(stage.name, model, folder, cfg, tmp_path)
    quantized, planned = load(tmp_path / "quantized.kir"), load(tmp_path / "planned.kir")
    samples = quantize_inputs(quantized, [[test[n][i].reshape(quantized.tensors[n].shape) for n in quantized.inputs] for i in range(8)])
    exe = host.build_executable([tmp_path / f"{model}.c"], [host.model_prefix(tmp_path / f"{model}.h")], tmp_path / "program",
                                sanitize=True, object_cache=shared_root(tmp_path_factory.getbasetemp(), "kiln-objects"))
    got, want = host.run_executable(exe, planned, samples), reference_outputs(quantized, samples)
    for i, (g, w) in enumerate(zip(got, want)):
        for a, b in zip(g, w):
            assert a.dtype == b.dtype and np.array_equal(a, b), f"{name} sample {i}: C {a.ravel()[:8]} != reference {b.ravel()[:8]}"
    assert len({o.tobytes() for row in want for o in row}) > 1, f"{name}: every sample gives the same output"


@pytest.mark.parametrize("name", C_PATTERNS)
def test_onnxruntime_qdq_file_compiles_to_its_own_accuracy(name: str, tmp_path: Path) -> None:
    """onnxruntime's QDQ file of the pattern, compiled by Kiln from its given parameters alone (no calibration),
    is as accurate as onnxruntime's own model of it: Kiln's integer arithmetic adds no error worth a dB."""
    pattern = ptq.BY_NAME[name]
    source = tmp_path / f"{name}.onnx"
    onnx.save(pattern.build(), str(source))
    calibration, test = ptq.data(pattern)
    qdq = ptq.ort_quantized(source, tmp_path / f"{name}_qdq.onnx", calibration, "MinMax")
    reference = ptq.float_outputs(pattern.build(), test)
    quantized = ptq.kiln_quantized(ptq.kiln_graph(tmp_path / f"{name}_qdq.onnx", name), {}, "minmax")
    kiln, ort = ptq.sqnr(reference, ptq.kiln_outputs(quantized, test)), ptq.sqnr(reference, ptq.float_outputs(qdq, test))
    assert abs(kiln - ort) < MARGIN_DB, f"{name}: Kiln {kiln:.2f} dB on onnxruntime's QDQ file, onnxruntime {ort:.2f} dB"
