"""Write `model.onnx` here: the autoencoder of ../ad_autoencoder, quantized by onnxruntime into a QDQ ONNX file.

The float model is exported with `torch.onnx.export` (batch norms folded
into the dense layers), then `onnxruntime.quantization.quantize_static`
makes it a QDQ model: int8 activations (asymmetric, MinMax ranges over the
source model's calibration samples) and per-channel symmetric int8 weights.
Doc strings and metadata are dropped from both: the exporter's hold absolute
paths, and none of it is part of the model. A QDQ model carries its own
quantization, so Kiln needs no calibration data for it.

`python export.py` re-creates the committed file byte for byte with the
pinned torch, onnx, onnxruntime and NumPy on the same kind of CPU (the
ranges come from onnxruntime's float32 inference, whose kernels depend on
the vector unit); `--out DIR` writes it elsewhere (the tests compare such a
copy with the committed file).
"""
from __future__ import annotations

import argparse
import importlib.util
import tempfile
from pathlib import Path
from types import ModuleType

import numpy as np
import onnx
import torch
from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "ad_autoencoder" / "model.py"
INPUT, OUTPUT = "frames", "reconstruction"


def source_module() -> ModuleType:
    """../ad_autoencoder/model.py, loaded by path."""
    spec = importlib.util.spec_from_file_location("ad_autoencoder_model", SOURCE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def without_metadata(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with every doc string and metadata entry removed."""
    graph = model.graph
    for proto in (model, graph, *graph.node, *graph.input, *graph.output, *graph.value_info, *graph.initializer):
        proto.doc_string = ""
        del proto.metadata_props[:]
    return model


class Samples(CalibrationDataReader):
    """The calibration samples, one feed at a time, as onnxruntime's calibrator reads them."""

    def __init__(self, samples: np.ndarray) -> None:
        self.feeds = iter([{INPUT: s} for s in samples])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.feeds, None)


def export(out: Path) -> None:
    defs = source_module()
    program = torch.onnx.export(defs.model(), defs.example_inputs(), input_names=[INPUT], output_names=[OUTPUT], dynamo=True)
    with tempfile.TemporaryDirectory() as tmp:
        float_path, qdq_path = Path(tmp) / "float.onnx", Path(tmp) / "qdq.onnx"
        onnx.save_model(without_metadata(program.model_proto), float_path)
        quantize_static(
            float_path, qdq_path, Samples(defs.calibration_data()), quant_format=QuantFormat.QDQ, per_channel=True,
            activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, calibrate_method=CalibrationMethod.MinMax,
        )
        quantized = onnx.load_model(qdq_path)
    onnx.save_model(without_metadata(quantized), out / "model.onnx")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder to write model.onnx into")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    export(args.out)


if __name__ == "__main__":
    main()
