"""The model.toml reference page, rendered from the schema and the stage registry.

`kiln doc model-toml` prints it, so an installed Kiln carries the reference
its scaffolded model.toml points to; `scripts/model_toml_doc.py --write`
writes the same text to docs/model-toml.md, and a test checks the two agree.
"""
from __future__ import annotations

import json
from typing import Any

from kiln.config import config_schema
from kiln.stages import STAGES

TYPE_NAMES = {str: "string", int: "integer", float: "float", bool: "boolean", list: "list"}

INTRO = """\
# model.toml reference

A model folder `models/<name>/` holds a `model.toml`: which source to
compile and how. Every table and key is optional; a missing key takes its
default. An unknown table or key is an error that names the file and the
closest known key. Values are checked where they are read, never pasted
blindly: no string holds a control character, `codegen.prefix` is a C
identifier, `codegen.weights_section` a plain section name, and
`model.source` a path inside the model folder.

Each table is part of the build signature of the stages that read it: a
change to one of its keys reruns those stages for that model (and what
follows them, when their output changes). Writing a key out with its
default value changes nothing: the signature holds the canonical text of
the table with defaults filled in.

This page is generated from the schema (each stage package's `config.py`):
`kiln doc model-toml` prints it. `kiln new NAME --from SOURCE` writes a
model.toml with every key below commented out at its default.
"""

INPUTS = """\
Free-form: one table per model input, named after the input
(`[inputs.image]`). Needed when the source leaves a dimension free (an ONNX
input with a named batch dimension); otherwise it must agree with the
source's own input shape.

| key | type | default | meaning |
|---|---|---|---|
| `shape` | list of positive integers | (required) | The input's static shape, batch dimension included. |
| `dtype` | string | `"float32"` | The input's element type; only `"float32"` model inputs are supported. |
"""


def type_name(types: type | tuple[type, ...]) -> str:
    return " or ".join(TYPE_NAMES.get(t, t.__name__) for t in (types if isinstance(types, tuple) else (types,)))


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def toml_value(value: Any) -> str:
    return cell(json.dumps(value))


def render() -> str:
    """The whole page (Markdown)."""
    parts = [INTRO]
    for table, keys in config_schema().items():
        readers = [s.name for s in STAGES if table in s.tables]
        parts.append(f"\n## `[{table}]`\n\nRead by: {', '.join(readers) or 'no stage'}.\n\n")
        if table == "inputs":
            parts.append(INPUTS)
            continue
        rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
        rows += [f"| `{k.name}` | {type_name(k.type)} | `{toml_value(k.default)}` | {cell(k.doc)} |" for k in keys.values()]
        parts.append("\n".join(rows) + "\n")
    return "".join(parts)
