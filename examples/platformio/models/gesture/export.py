"""Write `model.onnx` and `calibration.npy` here: the gesture classifier of ../../../external_repo as ONNX.

A firmware team's usual source: an ONNX file from its training code, and
samples to calibrate on. PlatformIO's Python then needs plain `kiln` (no
torch). `python export.py` re-creates both files (with Kiln's development
environment, which has torch).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import torch

from kiln.frontends.torch_module import load_model_py

HERE = Path(__file__).resolve().parent


def main() -> None:
    defs = load_model_py(HERE.parents[2] / "external_repo/models/gesture/model.py", "gesture_model")
    program = torch.onnx.export(defs.model(), defs.example_inputs(), input_names=["motion"], output_names=["scores"],
                                dynamo=True)
    model = program.model_proto
    for proto in (model, model.graph, *model.graph.node):
        proto.doc_string = ""
        del proto.metadata_props[:]
    onnx.save_model(model, HERE / "model.onnx")
    np.save(HERE / "calibration.npy", defs.calibration_data().numpy())


if __name__ == "__main__":
    main()
