"""`<model>.manifest`: what a model's host program was built from, for `kiln check`.

SCons writes it beside each model's program, after the program: the SHA-256
of the model's `quantized.kir` (the graph the reference executor runs),
`planned.kir` (the program's inputs and outputs) and generated C source.
`kiln check` compares the digests with the files in the build folder, so a
program left behind by a partial build (`scons MODEL-quantize`) is reported
as out of date rather than as a wrong compiler. Standard library only: the
SCons process imports it.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path


def recorded(model: str) -> tuple[str, ...]:
    """The build-folder files a model's manifest records."""
    return ("quantized.kir", "planned.kir", f"{model}.c")


def manifest(files: list[Path]) -> str:
    """The manifest text for `files`, by file name."""
    return json.dumps({f.name: digest(f) for f in files}, indent=1, sort_keys=True) + "\n"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def changed_since(build: Path, text: str) -> list[str]:
    """The files of a manifest whose content in `build` differs from what it records (or that are gone)."""
    recorded_digests = json.loads(text)
    return [name for name, d in sorted(recorded_digests.items()) if not (build / name).is_file() or digest(build / name) != d]
