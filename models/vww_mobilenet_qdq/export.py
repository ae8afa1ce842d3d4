"""Write `model.onnx` here: the MobileNetV1 of ../vww_mobilenet, quantized by onnxruntime into a QDQ ONNX file.

The float model is exported with `torch.onnx.export` (batch norms folded
into the convolutions), then `onnxruntime.quantization.quantize_static`
makes it a QDQ model: int8 activations (asymmetric, MinMax ranges over the
source model's calibration samples) and per-channel symmetric int8 weights.
A QDQ model carries its own quantization, so Kiln needs no calibration
data for it; `calibration.npy` holds the samples onnxruntime calibrated with,
which the build keeps for its reports.

`python export.py` re-creates `calibration.npy` byte for byte on any machine
and `model.onnx` on the same kind of CPU only (see ../_kit/variants.py);
`--out DIR` writes them elsewhere.
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "_kit"))
import variants  # noqa: E402


def export(out: Path) -> None:
    variants.export_qdq("vww_mobilenet", out, "image", "scores")


if __name__ == "__main__":
    variants.main(__doc__, HERE, export)
