"""Write `model.onnx` and `calibration.npy` here: the DS-CNN of ../kws_dscnn exported to ONNX.

The ONNX file is what `torch.onnx.export` gives by default (batch norms
folded into the convolutions, Keras 'same' padding into the conv pads),
minus the exporter's provenance metadata: its stack traces hold absolute
paths, and none of it is part of the model. `calibration.npy` holds the
source model's calibration samples, shaped (N, 1, 1, 49, 10).

`python export.py` re-creates both committed files byte for byte with the
pinned torch, onnx and NumPy; `--out DIR` writes them elsewhere (the tests
compare such a copy with the committed files).
"""
from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np
import onnx
import torch

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "kws_dscnn" / "model.py"


def source_module() -> ModuleType:
    """../kws_dscnn/model.py, loaded by path."""
    spec = importlib.util.spec_from_file_location("kws_dscnn_model", SOURCE)
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


def export(out: Path) -> None:
    defs = source_module()
    program = torch.onnx.export(defs.model(), defs.example_inputs(), input_names=["mfcc"], output_names=["scores"], dynamo=True)
    onnx.save_model(without_metadata(program.model_proto), out / "model.onnx")
    np.save(out / "calibration.npy", defs.calibration_data())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder to write model.onnx and calibration.npy into")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    export(args.out)


if __name__ == "__main__":
    main()
