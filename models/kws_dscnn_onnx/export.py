"""Write `model.onnx` and `calibration.npy` here: the DS-CNN of ../kws_dscnn exported to ONNX.

The ONNX file is what `torch.onnx.export` gives by default (batch norms
folded into the convolutions, Keras 'same' padding into the conv pads),
minus the exporter's metadata. `calibration.npy` holds the source model's
calibration samples, shaped (N, 1, 1, 49, 10).

`python export.py` re-creates both committed files byte for byte (see
../_kit/variants.py); `--out DIR` writes them elsewhere.
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "_kit"))
import variants  # noqa: E402


def export(out: Path) -> None:
    variants.export_onnx("kws_dscnn", out, "mfcc", "scores")


if __name__ == "__main__":
    variants.main(__doc__, HERE, export)
