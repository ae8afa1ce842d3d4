"""The Cortex-M4 target: cross-compiler flags, the firmware's model table, and direct builds.

The SCons tool `kiln_cortex_m` and `build_firmware` (for tests and one-off
builds without SCons) read the same settings from here; standard library and
relative imports only, as the registry (the SCons tool loads this module). A firmware image
links generated models with `runtime/` (minus the host harness), the kernel
stubs, and `runtime/cortex_m4/` (startup, semihosting, harness); a generated
C file (`kiln/model_table.py`) holds the model table and the arena, I/O and
layer-log buffers sized for the largest linked model.
"""
from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from ..errors import KilnError
from ..model_table import FirmwareModel, model_table
from ..paths import STRICT_FLAGS, runtime, runtime_sources

RUNTIME = runtime()
PLATFORM = RUNTIME / "cortex_m4"
LINKER_SCRIPT = PLATFORM / "mps2_an386.ld"
CC = "arm-none-eabi-gcc"
CPU_FLAGS = ["-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"]
CFLAGS = STRICT_FLAGS + ["-O2"]
CCFLAGS = CPU_FLAGS + ["-ffunction-sections", "-fdata-sections"]
LINKFLAGS = CPU_FLAGS + ["-nostartfiles", "--specs=nano.specs", "-Wl,--gc-sections", "-Wl,--orphan-handling=error"]
LIBS = ["m"]


def platform_sources() -> list[Path]:
    """Every C file a firmware links besides the models and their table."""
    return runtime_sources() + sorted(PLATFORM.glob("*.c"))


def include_dirs() -> list[Path]:
    return [RUNTIME, PLATFORM]


def link_flags(out: Path) -> list[str]:
    """Link flags for the image `out`: the linker script and a map file next to it."""
    return LINKFLAGS + [f"-T{LINKER_SCRIPT}", f"-Wl,-Map={out.with_suffix('.map')}"]


def build_firmware(sources: list[Path], models: list[FirmwareModel], out: Path, cflags: list[str] | None = None) -> Path:
    """Compile and link `sources` (generated models, or any C files) into the ELF image `out`.

    Objects go next to `out` in the folders the SCons build uses, so the link
    map splits the same way (see `kiln.target.size`). `cflags` adds flags
    (e.g. -D...). Rebuilds only when the inputs changed: a content hash of them
    is kept next to the image.
    """
    flags = CFLAGS + CCFLAGS + list(cflags or [])
    table_text = model_table([m.prefix for m in models], models)
    platform = platform_sources()
    digest = hashlib.sha256("\0".join([CC, *flags, *LINKFLAGS, table_text]).encode())
    headers = sorted({h for d in {s.parent for s in [*sources, *platform]} for h in d.glob("*.h")})
    for f in [*sources, *platform, *headers, LINKER_SCRIPT]:
        digest.update(f.read_bytes())
    stamp = out.with_name(out.name + ".sha256")
    if out.exists() and stamp.exists() and stamp.read_text() == digest.hexdigest():
        return out
    if shutil.which(CC) is None:
        raise KilnError(f"cross compiler {CC!r} not found (scripts/setup.sh installs gcc-arm-none-eabi)")
    out.parent.mkdir(parents=True, exist_ok=True)
    table = out.with_name(out.stem + "_models.c")
    table.write_text(table_text)
    includes = sorted({f"-I{d}" for d in [*include_dirs(), *(s.parent for s in sources)]})
    jobs = [(s, out.parent / f"{s.stem}.o") for s in [*sources, table]]
    jobs += [(s, out.parent / f"_{s.parent.name}" / f"{s.stem}.o") for s in platform]
    for src, obj in jobs:
        obj.parent.mkdir(parents=True, exist_ok=True)
        _run([CC, *flags, *includes, "-c", str(src), "-o", str(obj)], src)
    _run([CC, *(str(o) for _, o in jobs), *link_flags(out), "-o", str(out), *(f"-l{lib}" for lib in LIBS)], out)
    stamp.write_text(digest.hexdigest())
    return out


def _run(cmd: list[str], subject: Path) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise KilnError(f"{subject}: cross compilation failed:\n{proc.stderr.strip()}")
