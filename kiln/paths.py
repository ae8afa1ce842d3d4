"""Where Kiln's C runtime, portable kernels and SCons tools are, in an installed wheel or in a source checkout.

A source checkout keeps them at the repository root (`runtime/`,
`firmware_stubs/`, `site_scons/site_tools/`); the wheel carries the same
folders inside the package (`kiln/runtime/`, `kiln/firmware_stubs/`,
`kiln/site_tools/`). Standard library only: the SCons tool loads this module.
"""
from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
# The C dialect every build compiles generated code, the runtime and the kernels with.
STRICT_FLAGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]


def _folder(installed: str, checkout: str) -> Path:
    inside = PACKAGE / installed
    return inside if inside.is_dir() else PACKAGE.parent / checkout


def runtime() -> Path:
    """The C runtime: `kiln_runtime.h`, the kernel ABI header `kiln_kernels.h`, the host harness, the platform folders."""
    return _folder("runtime", "runtime")


def stubs() -> Path:
    """The portable reference implementations of the kernel symbols (`firmware_stubs/`)."""
    return _folder("firmware_stubs", "firmware_stubs")


def runtime_sources() -> list[Path]:
    """The C files every program links besides its models: the runtime (without the host harness) and the kernels."""
    return sorted(p for p in runtime().glob("*.c") if p.name != "host_main.c") + sorted(stubs().glob("*.c"))


def scons_tools() -> Path:
    """The folder of the SCons tools `kiln_scons` and `kiln_cortex_m`, for `toolpath=[...]`."""
    return _folder("site_tools", "site_scons/site_tools")


def source_checkout() -> bool:
    """True when this package is a source checkout's `kiln/` (not an installed wheel's)."""
    return not (PACKAGE / "runtime").is_dir() and (PACKAGE.parent / "runtime").is_dir()
