"""The zoo's variant files: a model.py of the zoo written out as an ONNX file, a QDQ ONNX file, a .pt2
program or an int8 .tflite file.

Each variant folder's `export.py` calls one `export_*` function here and
`main` for its command line. Every writer drops what would tie the bytes to
the machine that wrote them (the exporters' doc strings, metadata and stack
traces hold absolute paths), so re-running an `export.py` with the pinned
torch, onnx, onnxruntime and NumPy re-creates the committed files byte for
byte; the tests compare a fresh copy written with `--out DIR`.
"""
from __future__ import annotations

import argparse
import re
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Callable

import numpy as np
import onnx
import torch
from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static

from kiln.frontends.torch_module import load_model_py

MODELS = Path(__file__).resolve().parent.parent
FRAME = re.compile(r'  File "(?P<file>[^"]+)", line \d+, in \w+\n    .*\n?')


def source_path(base: str) -> Path:
    """models/<base>/model.py: the model a variant is written from."""
    return MODELS / base / "model.py"


def source_module(base: str) -> ModuleType:
    """models/<base>/model.py, loaded by path as module `<base>_model` (the name the exported programs record)."""
    return load_model_py(source_path(base), f"{base}_model")


def without_metadata(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with every doc string and metadata entry removed."""
    graph = model.graph
    for proto in (model, graph, *graph.node, *graph.input, *graph.output, *graph.value_info, *graph.initializer):
        proto.doc_string = ""
        del proto.metadata_props[:]
    return model


def _float_onnx(defs: ModuleType, input_name: str, output_name: str) -> onnx.ModelProto:
    """What `torch.onnx.export` gives by default (batch norms folded into the layers), without metadata."""
    program = torch.onnx.export(defs.model(), defs.example_inputs(), input_names=[input_name],
                                output_names=[output_name], dynamo=True)
    return without_metadata(program.model_proto)


def export_onnx(base: str, out: Path, input_name: str, output_name: str) -> None:
    """Write `model.onnx` (float) and `calibration.npy` (the source's calibration samples) into `out`."""
    defs = source_module(base)
    onnx.save_model(_float_onnx(defs, input_name, output_name), out / "model.onnx")
    np.save(out / "calibration.npy", defs.calibration_data())


class Samples(CalibrationDataReader):
    """The calibration samples, one feed at a time, as onnxruntime's calibrator reads them."""

    def __init__(self, input_name: str, samples: np.ndarray) -> None:
        self.feeds = iter([{input_name: s} for s in samples])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.feeds, None)


def export_qdq(base: str, out: Path, input_name: str, output_name: str) -> None:
    """Write `model.onnx` quantized by onnxruntime (QDQ, int8 MinMax activations, per-channel int8 weights)
    and `calibration.npy`, the samples it was calibrated with.

    The ranges come from onnxruntime's float32 inference over the samples,
    whose kernels depend on the vector unit: `model.onnx` is reproducible
    byte for byte on the same kind of CPU only. Kiln needs no samples for a
    QDQ file; the build keeps them for its reports and checks.
    """
    defs = source_module(base)
    with tempfile.TemporaryDirectory() as tmp:
        float_path, qdq_path = Path(tmp) / "float.onnx", Path(tmp) / "qdq.onnx"
        onnx.save_model(_float_onnx(defs, input_name, output_name), float_path)
        quantize_static(
            float_path, qdq_path, Samples(input_name, defs.calibration_data()), quant_format=QuantFormat.QDQ,
            per_channel=True, activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
            calibrate_method=CalibrationMethod.MinMax,
        )
        quantized = onnx.load_model(qdq_path)
    onnx.save_model(without_metadata(quantized), out / "model.onnx")
    np.save(out / "calibration.npy", defs.calibration_data())


def export_tflite(base: str, out: Path) -> None:
    """Write `model.tflite` and `calibration.npy`: the model quantized by Kiln with an NHWC input (as TFLite
    models take images and spectrograms) and written by Kiln's TFLite exporter (`kiln export`), and
    the source's calibration samples in that layout, shaped (N, 1, H, W, C).

    Kiln's stages and its exporter are deterministic, so the bytes depend only on the pinned packages.
    """
    from kiln import config
    from kiln.export.tflite import to_tflite
    from kiln.ir import load
    from kiln.runner import run_stage

    cfg = config.load(MODELS / base / "model.toml")
    cfg["normalize"]["input_layout"] = "NHWC"
    with tempfile.TemporaryDirectory() as tmp:
        for stage in ("import", "normalize", "quantize"):
            run_stage(stage, base, MODELS / base, cfg, Path(tmp))
        graph = load(Path(tmp) / "quantized.kir")
    (out / "model.tflite").write_bytes(to_tflite(graph).model)
    np.save(out / "calibration.npy", np.ascontiguousarray(source_module(base).calibration_data().transpose(0, 1, 3, 4, 2)))


def model_frames(stack_trace: str, source: Path) -> str:
    """The frames of `stack_trace` in the model's file `source`, with the file named by its base name."""
    frames = [m.group(0) for m in FRAME.finditer("  " + stack_trace) if Path(m["file"]) == source]
    return "".join(f.replace(str(source), source.name) for f in frames).strip()


def export_pt2(base: str, out: Path) -> None:
    """Write `model.pt2` (torch.export, stack traces cut to the model's own frames) and `calibration.npy`."""
    defs = source_module(base)
    program = torch.export.export(defs.model(), defs.example_inputs())
    for node in program.graph.nodes:
        if "stack_trace" in node.meta:
            node.meta["stack_trace"] = model_frames(node.meta["stack_trace"], source_path(base))
    torch.export.save(program, out / "model.pt2")
    np.save(out / "calibration.npy", defs.calibration_data())


def main(doc: str, folder: Path, export: Callable[[Path], None]) -> None:
    """The command line of a variant's export.py: write its files into `folder`, or `--out DIR`."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--out", type=Path, default=folder, help="folder to write the files into (default: the variant's folder)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    export(args.out)
