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
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from kiln import paths
from kiln.atomic import write_atomic
from kiln.errors import KilnError
from kiln.ir.graph import DTYPES, Graph
from kiln.model_table import model_table
from kiln.paths import STRICT_FLAGS, runtime_sources

RUNTIME = paths.runtime()
STUBS = paths.stubs()
SANITIZE_FLAGS = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g"]


def model_prefix(header: Path) -> str:
    """The symbol prefix of a generated model, read from its header's descriptor declaration."""
    match = re.search(r"extern const kiln_model_t (\w+)_model;", header.read_text())
    if not match:
        raise KilnError(f"{header}: not a Kiln model header")
    return match.group(1)


def build_executable(model_sources: list[Path], prefixes: list[str], out: Path, sanitize: bool = False, cc: str | None = None,
                     main: Path | None = None, object_cache: Path | None = None) -> Path:
    """Compile generated model sources into a host executable at `out`.

    `main` replaces the harness `runtime/host_main.c` (test programs drive
    invoke themselves). Each source compiles to an object kept in
    `object_cache` (default: `<out>.objects`) under a hash of its content,
    the headers it can include and the flags, so the runtime and kernels
    compile once per cache and only changed models recompile. The link is
    skipped when nothing changed (a hash is kept next to the executable).
    """
    cc = cc or os.environ.get("CC", "gcc")
    flags = STRICT_FLAGS + ["-O2"] + (SANITIZE_FLAGS if sanitize else [])
    if shutil.which(cc) is None:
        raise KilnError(f"C compiler {cc!r} not found")
    table = out.with_name(out.name + "_models.c")
    write_atomic(table, model_table(prefixes).encode())
    cache = object_cache or out.with_name(out.name + ".objects")
    cache.mkdir(parents=True, exist_ok=True)
    units = [(s, [RUNTIME, s.parent]) for s in model_sources]
    units += [(s, [RUNTIME]) for s in runtime_sources() + [main or RUNTIME / "host_main.c", table]]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        objects = list(pool.map(lambda u: _object(cc, flags, u[0], u[1], cache), units))
    digest = hashlib.sha256("\0".join([cc, *flags, *(o.name for o in objects)]).encode()).hexdigest()
    stamp = out.with_name(out.name + ".sha256")
    if out.exists() and stamp.exists() and stamp.read_text() == digest:
        return out
    partial = out.with_name(f".{out.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    _run_cc([cc, *flags, *map(str, objects), "-o", str(partial), "-lm"], model_sources[0] if model_sources else out)
    os.replace(partial, out)  # concurrent builds of the same program each install a complete file
    write_atomic(stamp, digest.encode())
    return out


def _object(cc: str, flags: list[str], source: Path, include_dirs: list[Path], cache: Path) -> Path:
    """`source` compiled to an object in `cache`, named by a hash of everything that affects it."""
    digest = hashlib.sha256("\0".join([cc, *flags]).encode())
    for path in [source, *(h for d in sorted(set(include_dirs + [source.parent])) for h in sorted(d.glob("*.h")))]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    obj = cache / f"{source.stem}-{digest.hexdigest()[:20]}.o"
    if not obj.exists():
        partial = obj.with_name(f"{obj.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        includes = [f"-I{d}" for d in dict.fromkeys(include_dirs)]
        _run_cc([cc, *flags, *includes, "-c", str(source), "-o", str(partial)], source)
        os.replace(partial, obj)
    return obj


def _run_cc(cmd: list[str], blame: Path) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise KilnError(f"{blame}: C compilation failed:\n{proc.stderr.strip()}")


def _run(exe: Path, args: list[str], graph: Graph, samples: list[list[np.ndarray]], timeout: float) -> bytes:
    """The harness's stdout for raw samples (one list of input arrays per sample)."""
    payload = b"".join(np.ascontiguousarray(a, DTYPES[graph.tensors[n].dtype]).tobytes() for s in samples for n, a in zip(graph.inputs, s))
    try:
        proc = subprocess.run([str(exe), *args], input=payload, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise KilnError(f"{exe}: no exit within {timeout:g} s") from None
    if proc.returncode != 0:
        raise KilnError(f"{exe}: exited with status {proc.returncode}: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout


def run_tensors(exe: Path, graph: Graph, samples: list[list[np.ndarray]], model: str | None = None, timeout: float = 600) -> str:
    """The text report of `exe --tensors` on raw samples: every layer's output as the per-layer hook sees it."""
    return _run(exe, ["--tensors"] + ([model] if model else []), graph, samples, timeout).decode(errors="replace")


def run_executable(exe: Path, graph: Graph, samples: list[list[np.ndarray]], model: str | None = None, timeout: float = 120) -> list[list[np.ndarray]]:
    """Run `exe` on raw samples (one list of input arrays per sample); returns raw outputs per sample."""
    stdout = _run(exe, [model] if model else [], graph, samples, timeout)
    outs = [graph.tensors[n] for n in graph.outputs]
    per_sample = sum(t.nbytes for t in outs)
    if len(stdout) != per_sample * len(samples):
        raise KilnError(f"{exe}: wrote {len(stdout)} bytes, expected {per_sample * len(samples)}")
    result = []
    pos = 0
    for _ in samples:
        row = []
        for t in outs:
            row.append(np.frombuffer(stdout[pos : pos + t.nbytes], DTYPES[t.dtype]).reshape(t.shape).copy())
            pos += t.nbytes
        result.append(row)
    return result
