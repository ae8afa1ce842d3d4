"""Write `model.tflite` and `calibration.npy` here: the DS-CNN of ../kws_dscnn as an int8 TFLite file.

The file is ../kws_dscnn quantized by Kiln with an NHWC input ([1, 49, 10, 1], as the MLPerf
Tiny reference .tflite takes it) and written by Kiln's TFLite exporter (`kiln export`): int8
input and output, per-channel int8 weights, int32 biases, fused ReLUs, AVERAGE_POOL_2D,
FULLY_CONNECTED and SOFTMAX. `calibration.npy` holds the source model's calibration samples in
that layout, shaped (N, 1, 49, 10, 1).

`python export.py` re-creates both committed files byte for byte (see ../_kit/variants.py);
`--out DIR` writes them elsewhere.
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "_kit"))
sys.path.insert(0, str(HERE.parent.parent))
import variants  # noqa: E402


def export(out: Path) -> None:
    variants.export_tflite("kws_dscnn", out)


if __name__ == "__main__":
    variants.main(__doc__, HERE, export)
