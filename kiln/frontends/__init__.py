"""Frontends: a model source (model.py, .pt2, .onnx, .tflite) into a Kiln graph.

Every frontend returns an `Imported`: the graph (ONNX-named source ops, NCHW as
the source has it; the TFLite frontend gives kernel ops, NHWC as the file has them) and, when the source provides it (`calibration_data()` in a
model.py), calibration samples per graph input, each shaped (N, *input_shape).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from kiln.errors import KilnError
from kiln.frontends.imported import Imported


def import_model(source: Path, name: str, inputs: dict[str, Any], depends: tuple[Path, ...] | None = None) -> Imported:
    """Import `source` as graph `name`; `inputs` is the model.toml `inputs` table (name -> {shape, dtype}).

    `depends` are the model's `model.depends` files: the only files a
    model.py may load from outside its folder (see `torch_module`); None
    when there is no model.toml, and then nothing is checked.
    """
    suffix = source.suffix.lower()
    if not source.exists():
        raise KilnError(f"{source}: no such model source")
    if suffix == ".py":
        from kiln.frontends.torch_module import import_module_file

        return import_module_file(source, name, inputs, depends)
    if suffix == ".pt2":
        from kiln.frontends.torch_pt2 import import_pt2

        return import_pt2(source, name, inputs)
    if suffix == ".onnx":
        from kiln.frontends.onnx import import_onnx

        return import_onnx(source, name, inputs)
    if suffix == ".tflite":
        from kiln.frontends.tflite import import_tflite

        return import_tflite(source, name, inputs)
    raise KilnError(f"{source}: unknown model source type {suffix!r} (expected .py, .pt2, .onnx or .tflite)")
