"""Write `model.pt2` and `calibration.npy` here: the ResNet-8 of ../ic_resnet8 as a torch.export program.

The program is what `torch.export.export` and `torch.export.save` give,
except that each node's stack trace keeps only the frames in the model's
own file, named by its base name (`model.py`): Kiln quotes those frames in
its messages. A .pt2 has no calibration data, so `calibration.npy` holds
the source model's calibration samples, shaped (N, 1, 3, 32, 32).

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
    variants.export_pt2("ic_resnet8", out)


if __name__ == "__main__":
    variants.main(__doc__, HERE, export)
