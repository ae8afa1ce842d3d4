"""Write `model.pt2` and `calibration.npy` here: the ResNet-8 of ../ic_resnet8 as a torch.export program.

The program is what `torch.export.export` and `torch.export.save` give,
except that each node's stack trace keeps only the frames in the model's
own file, named by its base name (`model.py`): the traces otherwise hold
absolute paths. Kiln quotes those frames in its messages. A .pt2 has no
calibration data, so `calibration.npy` holds the source model's calibration
samples, shaped (N, 1, 3, 32, 32).

`python export.py` re-creates both committed files byte for byte with the
pinned torch and NumPy; `--out DIR` writes them elsewhere (the tests compare
such a copy with the committed files).
"""
from __future__ import annotations

import argparse
import importlib.util
import re
from pathlib import Path
from types import ModuleType

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "ic_resnet8" / "model.py"
FRAME = re.compile(r'  File "(?P<file>[^"]+)", line \d+, in \w+\n    .*\n?')


def source_module() -> ModuleType:
    """../ic_resnet8/model.py, loaded by path."""
    spec = importlib.util.spec_from_file_location("ic_resnet8_model", SOURCE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def model_frames(stack_trace: str) -> str:
    """The frames of `stack_trace` in the model's file, with the file named `model.py`."""
    frames = [m.group(0) for m in FRAME.finditer("  " + stack_trace) if Path(m["file"]) == SOURCE]
    return "".join(f.replace(str(SOURCE), SOURCE.name) for f in frames).strip()


def export(out: Path) -> None:
    defs = source_module()
    program = torch.export.export(defs.model(), defs.example_inputs())
    for node in program.graph.nodes:
        if "stack_trace" in node.meta:
            node.meta["stack_trace"] = model_frames(node.meta["stack_trace"])
    torch.export.save(program, out / "model.pt2")
    np.save(out / "calibration.npy", defs.calibration_data())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder to write model.pt2 and calibration.npy into")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    export(args.out)


if __name__ == "__main__":
    main()
