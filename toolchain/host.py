"""Host builds of generated models: compile with the host C compiler and run on NumPy arrays.

Used by `kiln run` and by tests. The executable links the generated model
with `runtime/` and `firmware_stubs/` and the generic harness
`runtime/host_main.c`, which reads raw input samples on stdin and writes raw
outputs on stdout.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np

from toolchain.errors import KilnError
from toolchain.ir.graph import DTYPES, Graph

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "runtime"
STUBS = ROOT / "firmware_stubs"
STRICT_FLAGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]
SANITIZE_FLAGS = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g"]


def runtime_sources() -> list[Path]:
    """The C files every host executable links: runtime (except the harness) and kernel stubs."""
    return sorted(p for p in RUNTIME.glob("*.c") if p.name != "host_main.c") + sorted(STUBS.glob("*.c"))


def model_prefix(header: Path) -> str:
    """The symbol prefix of a generated model, read from its header's descriptor declaration."""
    match = re.search(r"extern const kiln_model_t (\w+)_model;", header.read_text())
    if not match:
        raise KilnError(f"{header}: not a Kiln model header")
    return match.group(1)


def model_table(prefixes: list[str]) -> str:
    """The C source of the `kiln_models` table the harness looks models up in."""
    decls = "".join(f"extern const kiln_model_t {p}_model;\n" for p in prefixes)
    items = "".join(f"    &{p}_model,\n" for p in prefixes)
    return (f'#include "kiln_runtime.h"\n\n{decls}\nconst kiln_model_t *const kiln_models[] = {{\n{items}}};\n'
            f"const int kiln_model_count = {len(prefixes)};\n")


def build_executable(model_sources: list[Path], prefixes: list[str], out: Path, sanitize: bool = False, cc: str | None = None) -> Path:
    """Compile generated model sources into a host executable at `out`.

    Rebuilds only when the inputs (sources, flags) changed: a content hash of
    them is kept next to the executable.
    """
    cc = cc or os.environ.get("CC", "gcc")
    flags = STRICT_FLAGS + ["-O2"] + (SANITIZE_FLAGS if sanitize else [])
    table = out.with_name(out.name + "_models.c")
    table_text = model_table(prefixes)
    sources = list(model_sources) + runtime_sources() + [RUNTIME / "host_main.c"]
    digest = hashlib.sha256("\0".join([cc, *flags, table_text]).encode())
    for src in sources + [p for d in {s.parent for s in sources} for p in sorted(d.glob("*.h"))]:
        digest.update(src.read_bytes())
    stamp = out.with_name(out.name + ".sha256")
    if out.exists() and stamp.exists() and stamp.read_text() == digest.hexdigest():
        return out
    if shutil.which(cc) is None:
        raise KilnError(f"C compiler {cc!r} not found")
    table.write_text(table_text)
    includes = sorted({f"-I{d}" for d in [RUNTIME, *(s.parent for s in model_sources)]})
    cmd = [cc, *flags, *includes, *map(str, sources), str(table), "-o", str(out), "-lm"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise KilnError(f"{model_sources[0]}: C compilation failed:\n{proc.stderr.strip()}")
    stamp.write_text(digest.hexdigest())
    return out


def run_executable(exe: Path, graph: Graph, samples: list[list[np.ndarray]], model: str | None = None, timeout: float = 120) -> list[list[np.ndarray]]:
    """Run `exe` on raw samples (one list of input arrays per sample); returns raw outputs per sample."""
    payload = b"".join(np.ascontiguousarray(a, DTYPES[graph.tensors[n].dtype]).tobytes() for s in samples for n, a in zip(graph.inputs, s))
    proc = subprocess.run([str(exe)] + ([model] if model else []), input=payload, capture_output=True, timeout=timeout)
    if proc.returncode != 0:
        raise KilnError(f"{exe}: exited with status {proc.returncode}: {proc.stderr.decode(errors='replace').strip()}")
    outs = [graph.tensors[n] for n in graph.outputs]
    per_sample = sum(t.nbytes for t in outs)
    if len(proc.stdout) != per_sample * len(samples):
        raise KilnError(f"{exe}: wrote {len(proc.stdout)} bytes, expected {per_sample * len(samples)}")
    result = []
    pos = 0
    for _ in samples:
        row = []
        for t in outs:
            row.append(np.frombuffer(proc.stdout[pos : pos + t.nbytes], DTYPES[t.dtype]).reshape(t.shape).copy())
            pos += t.nbytes
        result.append(row)
    return result
