"""The few facts Kiln reads from a firmware image itself: its symbols, and so which target it was linked for.

Each target's linker script (`cortex_m.linker_script`) defines an absolute
symbol `__kiln_target_<name>` ('-' spelled '_'), so an image names its target
and a runner never starts it on the wrong board. A 32-bit little-endian ELF
reader: both toolchains' images are.

Standard library and relative imports only: the SCons tool `kiln_cortex_m`
loads this module under the registry's private package name.
"""
from __future__ import annotations

import struct
from pathlib import Path

from ..errors import KilnError

from .cortex_m import target_symbol
from .targets import TARGETS, Target


def symbols(elf: Path) -> dict[str, int]:
    """Name -> value of every named symbol in the image's symbol table."""
    data = elf.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 1 or data[5] != 1:
        raise KilnError(f"{elf}: not a 32-bit little-endian ELF image")
    shoff, = struct.unpack_from("<I", data, 0x20)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x2E)
    headers = [struct.unpack_from("<IIIIIIIIII", data, shoff + i * shentsize) for i in range(shnum)]
    found: dict[str, int] = {}
    for _, kind, _, _, offset, size, link, _, _, entsize in headers:
        if kind != 2 or not entsize:  # SHT_SYMTAB
            continue
        strtab = headers[link]
        base = strtab[4]
        for at in range(offset, offset + size, entsize):
            name_at, value = struct.unpack_from("<II", data, at)
            if name_at:
                end = data.index(b"\0", base + name_at)
                found[data[base + name_at:end].decode(errors="replace")] = value
    return found


def image_target(elf: Path) -> Target:
    """The target `elf` was linked for, from its `__kiln_target_*` symbol."""
    if not elf.is_file():
        raise KilnError(f"{elf}: no firmware image (build it with `scons target=NAME`)")
    names = {target_symbol(n): t for n, t in TARGETS.items()}
    found = [names[s] for s in symbols(elf) if s in names]
    if len(found) != 1:
        raise KilnError(f"{elf}: not a Kiln firmware image (it names no target)")
    return found[0]
