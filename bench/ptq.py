"""Post-training quantization quality against onnxruntime, on the quantization pattern suite.

For every pattern of `ptq_patterns.py` (a small float ONNX model and its input
distribution), 64 seeded calibration samples and 64 other test samples:

- Kiln: import, normalize, quantize with the calibration samples (one column
  per observer), then the integer reference executor on the test samples;
- onnxruntime: `quantize_static` on the same float model with the same
  calibration samples (QDQ, int8 activations, per-channel int8 weights; one
  column per calibration method), then the QDQ model evaluated with
  `onnx.reference.ReferenceEvaluator`, so the number does not depend on the
  CPU's vector unit;

and each output's SQNR (dB) against the float model (ReferenceEvaluator) over
the test samples. `margin` is Kiln's default (minmax) minus onnxruntime's
default (MinMax); the test suite holds it above -1 dB on every pattern.

    python bench/ptq.py [PATTERN...] [--observers minmax,mse] [--ort MinMax,Percentile] [--json FILE]
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ptq_patterns import BY_NAME, PATTERNS, Pattern  # noqa: E402

from kiln.frontends import import_model  # noqa: E402
from kiln.ir.graph import Graph  # noqa: E402
from kiln.normalize import normalize  # noqa: E402
from kiln.normalize.config import CONFIG as NORMALIZE_CONFIG  # noqa: E402
from kiln.quantize import quantize  # noqa: E402
from kiln.quantize.config import CONFIG as QUANT_CONFIG, OBSERVERS  # noqa: E402
from kiln.quantize.scheme import dequantize_array, quantize_array  # noqa: E402
from kiln.reference.batch import run_batch  # noqa: E402
from kiln.reference.int8 import INT8_IMPLS  # noqa: E402

CALIBRATION_SAMPLES = 64
TEST_SAMPLES = 64
ORT_METHODS = ("MinMax", "Percentile", "Entropy")
NORMALIZE_DEFAULTS = {k: v.default for k, v in NORMALIZE_CONFIG.items()}
QUANT_DEFAULTS = {k: v.default for k, v in QUANT_CONFIG.items()}


def data(pattern: Pattern) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Seeded calibration and test samples, [N, *input_shape[1:]] per input (a batch, as a data set holds them)."""
    return pattern.sample(np.random.default_rng(1), CALIBRATION_SAMPLES), pattern.sample(np.random.default_rng(2), TEST_SAMPLES)


def sqnr(reference: list[np.ndarray], got: list[np.ndarray]) -> float:
    """10·log10(signal / noise) over every output element of every test sample."""
    signal = sum(float(np.sum(np.asarray(r, np.float64) ** 2)) for r in reference)
    noise = sum(float(np.sum((np.asarray(r, np.float64) - np.asarray(g, np.float64).reshape(r.shape)) ** 2))
                for r, g in zip(reference, got))
    return math.inf if noise == 0.0 else 10.0 * math.log10(signal / noise)


def float_outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ReferenceEvaluator(model).run(None, feeds)


def kiln_graph(path: Path, name: str) -> Graph:
    """The float model imported and normalized, as the quantize stage receives it."""
    return normalize(import_model(path, name, {}).graph, NORMALIZE_DEFAULTS)


def kiln_quantized(graph: Graph, calibration: dict[str, np.ndarray], observer: str) -> Graph:
    return quantize(graph, dict(QUANT_DEFAULTS, observer=observer), calibration)


def kiln_outputs(quantized: Graph, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The int8 graph on float test samples: inputs quantized, the integer reference, outputs dequantized."""
    ints = {}
    for name in quantized.inputs:
        t = quantized.tensors[name]
        batch = feeds[name].reshape(len(feeds[name]), *t.shape)
        ints[name] = quantize_array(batch, t.quant) if t.dtype == "int8" else batch
    outs = run_batch(quantized, ints, table=INT8_IMPLS)
    return [dequantize_array(outs[n], quantized.tensors[n].quant) if quantized.tensors[n].quant else outs[n]
            for n in quantized.outputs]


def ort_quantized(source: Path, target: Path, calibration: dict[str, np.ndarray], method: str) -> onnx.ModelProto:
    """onnxruntime's quantize_static: QDQ, int8 activations and per-channel int8 weights, `method` calibration."""
    from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            count = len(next(iter(calibration.values())))
            self.feeds = iter([{k: v[i:i + 1] for k, v in calibration.items()} for i in range(count)])

        def get_next(self):
            return next(self.feeds, None)

    logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # its histogram calibrators print their progress
            quantize_static(str(source), str(target), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                            activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                            calibrate_method=getattr(CalibrationMethod, method))
    finally:
        logging.disable(logging.NOTSET)
    return onnx.load(str(target))


def measure(pattern: Pattern, work: Path, observers: tuple[str, ...] = ("minmax",), methods: tuple[str, ...] = ("MinMax",)) -> dict:
    """One pattern's row: Kiln's SQNR per observer and onnxruntime's per calibration method, in dB."""
    model = pattern.build()
    source = work / f"{pattern.name}.onnx"
    onnx.save(model, str(source))
    calibration, test = data(pattern)
    reference = float_outputs(model, test)
    graph = kiln_graph(source, pattern.name)
    row = {"pattern": pattern.name, "kiln": {}, "onnxruntime": {}}
    for observer in observers:
        row["kiln"][observer] = sqnr(reference, kiln_outputs(kiln_quantized(graph, calibration, observer), test))
    for method in methods:
        qdq = ort_quantized(source, work / f"{pattern.name}_{method}.onnx", calibration, method)
        row["onnxruntime"][method] = sqnr(reference, float_outputs(qdq, test))
    if "minmax" in row["kiln"] and "MinMax" in row["onnxruntime"]:
        row["margin"] = row["kiln"]["minmax"] - row["onnxruntime"]["MinMax"]
    return row


def table(rows: list[dict], observers: tuple[str, ...], methods: tuple[str, ...]) -> str:
    head = ["pattern"] + [f"kiln {o}" for o in observers] + [f"ort {m}" for m in methods] + ["margin"]
    lines = ["| " + " | ".join(head) + " |", "|---" + "|---:" * (len(head) - 1) + "|"]
    for r in rows:
        cells = [r["pattern"]] + [f"{r['kiln'][o]:.1f}" for o in observers] + [f"{r['onnxruntime'][m]:.1f}" for m in methods]
        cells.append(f"{r['margin']:+.1f}" if "margin" in r else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("patterns", nargs="*", help=f"patterns to run (default: all {len(PATTERNS)})")
    parser.add_argument("--observers", default=",".join(OBSERVERS), help="Kiln observers, comma-separated")
    parser.add_argument("--ort", default="MinMax,Percentile", help=f"onnxruntime calibration methods ({', '.join(ORT_METHODS)})")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = parser.parse_args()
    unknown = [p for p in args.patterns if p not in BY_NAME]
    if unknown:
        parser.error(f"unknown pattern(s) {', '.join(unknown)} (known: {', '.join(BY_NAME)})")
    observers, methods = tuple(args.observers.split(",")), tuple(args.ort.split(","))
    rows = []
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for pattern in [BY_NAME[p] for p in args.patterns] or PATTERNS:
            rows.append(measure(pattern, Path(tmp), observers, methods))
            print(f"{pattern.name}: done", file=sys.stderr)
    print(table(rows, observers, methods))
    print(f"\n{len(rows)} patterns, {CALIBRATION_SAMPLES} calibration and {TEST_SAMPLES} test samples each, "
          f"{time.monotonic() - start:.0f} s", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
