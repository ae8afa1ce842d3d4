"""`kiln new NAME --from SOURCE`: a new model folder with a commented model.toml.

The model.toml names the copied source and lists every other key of the
schema, commented out at its default with its meaning and the stage that
reads it, so a user edits a value instead of looking up a key name.
"""
from __future__ import annotations

import json
import re
import shutil
import textwrap
from pathlib import Path
from typing import Any

from kiln.config import Key, config_schema
from kiln.errors import KilnError
from kiln.stages import STAGES

SOURCE_NAMES = {".py": "model.py", ".onnx": "model.onnx", ".pt2": "model.pt2", ".tflite": "model.tflite"}
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*")


def new_model(name: str, source: Path, models_dir: Path) -> Path:
    """Create `models_dir/name/` with `source` copied in and a commented model.toml; returns the folder."""
    if not NAME.fullmatch(name):
        raise KilnError(f"{name!r}: a model name is letters, digits, '_' and '-' (it names a folder and C symbols)")
    if not source.is_file():
        raise KilnError(f"{source}: no such model source")
    target_name = SOURCE_NAMES.get(source.suffix.lower())
    if target_name is None:
        raise KilnError(f"{source}: unknown model source type {source.suffix!r} (expected .py, .onnx, .pt2 or .tflite)")
    folder = models_dir / name
    if folder.exists():
        raise KilnError(f"{folder}: already exists; not overwriting it")
    extra = _onnx_external_data(source) if target_name == "model.onnx" else []
    inputs = _onnx_inputs(source) if target_name == "model.onnx" else _tflite_inputs(source) if target_name == "model.tflite" else []
    folder.mkdir(parents=True)
    shutil.copyfile(source, folder / target_name)
    for rel in extra:
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source.parent / rel, folder / rel)
    (folder / "model.toml").write_text(model_toml(name, target_name, inputs))
    return folder


def model_toml(name: str, source: str, inputs: list[tuple[str, list[Any]]]) -> str:
    """The commented model.toml of a new model: `[model] source` set, every other key at its default."""
    lines = [f"# {name}: compiled by Kiln. Every key below is optional; the commented values are the defaults.",
             "# The reference of every key: `kiln doc model-toml`."]
    for table, keys in config_schema().items():
        lines += ["", f"# Read by {_readers(table)}."]
        if table == "inputs":
            lines += _inputs_section(inputs)
            continue
        lines.append(f"[{table}]")
        for key in keys.values():
            lines += _key_lines(key, source if (table, key.name) == ("model", "source") else None)
    return "\n".join(lines) + "\n"


def _readers(table: str) -> str:
    names = [s.name for s in STAGES if table in s.tables]
    if not names:
        return "no stage"
    return f"the {names[0]} stage" if len(names) == 1 else f"the {', '.join(names[:-1])} and {names[-1]} stages"


def _key_lines(key: Key, value: Any = None) -> list[str]:
    doc = textwrap.wrap(key.doc, 96, initial_indent="# ", subsequent_indent="# ")
    if value is not None:
        return doc + [f"{key.name} = {json.dumps(value)}"]
    return doc + [f"# {key.name} = {json.dumps(key.default)}"]


def _inputs_section(inputs: list[tuple[str, list[Any]]]) -> list[str]:
    lines = ["# One table per model input: its shape (static, batch included) and dtype (float32).",
             "# Needed when the source leaves a dimension free; otherwise it must agree with the source."]
    for input_name, dims in inputs or [("NAME", ["..."])]:
        shown = [d if isinstance(d, int) else re.sub(r"[^A-Za-z0-9_.?]", "_", d) for d in dims]
        lines += [f"# [inputs.{_toml_key(input_name)}]", f"# shape = [{', '.join(map(str, shown))}]"]
    return lines


def _toml_key(name: str) -> str:
    """`name` as a TOML key: bare when it can be, else a quoted string with every control character
    escaped (a name from a model file must not start a line of its own in model.toml)."""
    if re.fullmatch(r"[A-Za-z0-9_-]+", name):
        return name
    escaped = "".join(f"\\u{ord(ch):04X}" if ord(ch) < 32 or ord(ch) == 0x7F else "\\" + ch if ch in '"\\' else ch
                      for ch in name)
    return f'"{escaped}"'


def _onnx_model(source: Path):
    import onnx

    try:
        return onnx.load(str(source), load_external_data=False)
    except Exception as exc:  # onnx raises several types for a file that is no model
        raise KilnError(f"{source}: not a readable ONNX model ({exc})") from None


def _onnx_inputs(source: Path) -> list[tuple[str, list[Any]]]:
    """Each real graph input with its dimensions (a free one shown by its name, to fill in)."""
    model = _onnx_model(source)
    constant = {t.name for t in model.graph.initializer}
    out = []
    for vi in model.graph.input:
        if vi.name in constant:
            continue
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in vi.type.tensor_type.shape.dim]
        out.append((vi.name, dims))
    return out


def _tflite_inputs(source: Path) -> list[tuple[str, list[Any]]]:
    """Each input of a .tflite file with its (static) shape, as the TFLite frontend names it."""
    from kiln.frontends.tflite.convert import Converter
    from kiln.frontends.tflite.read import read_tflite
    from kiln.ir.graph import Graph

    model = read_tflite(source)
    names = Converter(model, Graph("scaffold")).names
    return [(names[i], list(model.tensors[i].shape)) for i in model.inputs]


def _onnx_external_data(source: Path) -> list[str]:
    """The external data files an ONNX model names, relative to it (they are copied with it)."""
    from onnx.external_data_helper import uses_external_data

    model = _onnx_model(source)
    files = set()
    for tensor in model.graph.initializer:
        if not uses_external_data(tensor):
            continue
        location = next(e.value for e in tensor.external_data if e.key == "location")
        path = (source.parent / location).resolve()
        if not path.is_relative_to(source.parent.resolve()) or not path.is_file():
            raise KilnError(f"{source}: external data {location!r} of tensor {tensor.name!r} is not a file next to the model")
        files.add(Path(location).as_posix())
    return sorted(files)
