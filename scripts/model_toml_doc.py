"""Writes docs/model-toml.md, the model.toml reference `kiln doc model-toml` prints (kiln/model_toml_doc.py).

    python scripts/model_toml_doc.py            # print the page
    python scripts/model_toml_doc.py --write    # update docs/model-toml.md

A test checks that the committed page equals the command's output, so the
page cannot drift from the keys the code accepts.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kiln.model_toml_doc import render  # noqa: E402

PAGE = ROOT / "docs" / "model-toml.md"


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
