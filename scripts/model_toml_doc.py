"""Writes docs/model-toml.md, the model.toml reference, from the schema and the stage registry.

    python scripts/model_toml_doc.py            # print the page
    python scripts/model_toml_doc.py --write    # update docs/model-toml.md

A test checks that the committed page equals this script's output, so the
page cannot drift from the keys the code accepts.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kiln.config import config_schema  # noqa: E402
from kiln.stages import STAGES  # noqa: E402

PAGE = ROOT / "docs" / "model-toml.md"
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

This page is generated from the schema (each stage package's `config.py`)
by `python scripts/model_toml_doc.py --write`; a test checks it is current.
`kiln new NAME --from SOURCE` writes a model.toml with every key below
commented out at its default.
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


def toml_value(value: Any) -> str:
    return json.dumps(value)


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def render() -> str:
    """The whole page."""
    parts = [INTRO]
    for table, keys in config_schema().items():
        readers = [s.name for s in STAGES if table in s.tables]
        parts.append(f"\n## `[{table}]`\n\nRead by: {', '.join(readers) or 'no stage'}.\n\n")
        if table == "inputs":
            parts.append(INPUTS)
            continue
        rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
        rows += [f"| `{k.name}` | {type_name(k.type)} | `{cell(toml_value(k.default))}` | {cell(k.doc)} |" for k in keys.values()]
        parts.append("\n".join(rows) + "\n")
    return "".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {PAGE.relative_to(ROOT)} instead of printing")
    args = parser.parse_args()
    if args.write:
        PAGE.write_text(render())
    else:
        sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
