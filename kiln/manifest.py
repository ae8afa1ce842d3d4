"""`<model>.manifest`: what a model's own program was built from, for `kiln check`.

SCons writes it beside each model's program, after the program: the
program's file name and its target (`host` or a firmware target), and the
SHA-256 of the model's `quantized.kir` (the graph the reference executor
runs), `planned.kir` (the program's inputs and outputs) and generated C
source. `kiln check` runs that program on that target and compares the
digests with the files in the build folder, so a program left behind by a
partial build (`scons MODEL-quantize`) is reported as out of date rather
than as a wrong compiler. Each build root also gets `_kiln/build.json`
(`root_record`): its target and the `scons` arguments that build it, for a
model that has no program yet. Standard library only: the SCons process
imports it.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path


def recorded(model: str) -> tuple[str, ...]:
    """The build-folder files a model's manifest records."""
    return ("quantized.kir", "planned.kir", f"{model}.c")


def manifest(files: list[Path], program: str, target: str) -> str:
    """The manifest text of `program` (a file name beside it) built for `target` from `files` (by file name)."""
    return json.dumps({"files": {f.name: digest(f) for f in files}, "program": program, "target": target},
                      indent=1, sort_keys=True) + "\n"


def read(text: str) -> dict:
    """A manifest's fields; ValueError when it is not one."""
    found = json.loads(text)
    if not (isinstance(found, dict) and isinstance(found.get("files"), dict) and isinstance(found.get("program"), str)
            and isinstance(found.get("target"), str) and "/" not in found["program"]):
        raise ValueError("not a Kiln manifest")
    return found


ROOT_RECORD = "_kiln/build.json"


def root_record(target: str, scons_args: str) -> str:
    return json.dumps({"scons_args": scons_args, "target": target}, sort_keys=True) + "\n"


def read_root(root: Path) -> dict:
    """A build root's record (`{"target": "host", "scons_args": ""}` when it has none, or an unreadable one)."""
    try:
        found = json.loads((root / ROOT_RECORD).read_text())
    except (OSError, ValueError):
        found = None
    if not (isinstance(found, dict) and isinstance(found.get("target"), str) and isinstance(found.get("scons_args"), str)):
        return {"target": "host", "scons_args": ""}
    return found


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def changed_since(build: Path, text: str) -> list[str]:
    """The files of a manifest whose content in `build` differs from what it records (or that are gone)."""
    recorded_digests = read(text)["files"]
    return [name for name, d in sorted(recorded_digests.items()) if not (build / name).is_file() or digest(build / name) != d]
