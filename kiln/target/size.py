"""Flash and RAM use of a firmware image, read from the ELF and its map file, against its board's memory.

Flash is every loaded section in the target's read-only regions (flash, and
the constants' own region where the board has one: the M55's QSPI flash)
plus the initial values of .data; RAM is .data, .bss (which holds the arena
and the I/O buffers) and the reserved stack. Each memory region's use is
also reported apart (`regions`), so an image that fits in total but
overflows one region does not fit. The generated weights are the `k_const*`
arrays, wherever `codegen.weights_section` put them. With the link map next to the image, the
flash and RAM bytes are also split by part: the model's generated code and
data, the kernels, the runtime, the platform (startup, harness, model table)
and the C library. Each image is measured against the memory map of the
target it names (`targets.py`): the flash and RAM columns say how much of
the board's memory it takes, and `fits` whether it fits.

`budget()` answers the same question before anything is linked or run, from
a model's generated header (arena and I/O bytes) and its compiled object
(code and constants), plus the target's stack and what the platform itself
takes: a model too large for a board is reported from it, and its link then
fails with the linker's region overflow (`cortex_m.link_error`).

    python -m kiln.target.size [--json FILE] ELF_OR_FOLDER...

Standard library and relative imports only: the SCons tool `kiln_cortex_m`
loads this module under the registry's private package name.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import KilnError

from .elf import image_target
from .targets import Target

WEIGHT_SYMBOL = re.compile(r"k_const\d+")


@dataclass(frozen=True)
class Section:
    name: str
    size: int
    address: int
    load_address: int
    loaded: bool  # has contents in the image (not NOLOAD / .bss)


@dataclass
class SizeReport:
    image: str
    code: int
    weights: int
    constants: int
    data: int
    bss: int
    arena: int
    io: int
    stack: int
    target: str = ""
    flash_size: int = 0
    ram_size: int = 0
    regions: dict[str, dict[str, int]] = field(default_factory=dict)  # FLASH, RODATA, RAM: bytes used and size
    parts: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def flash(self) -> int:
        return self.code + self.weights + self.constants + self.data

    @property
    def ram(self) -> int:
        return self.data + self.bss + self.stack

    @property
    def fits(self) -> bool:
        within = all(r["used"] <= r["size"] for r in self.regions.values())
        return within and self.flash <= self.flash_size and self.ram <= self.ram_size


def _tool(target: Target, name: str, *args: str) -> str:
    exe = target.toolchain + name
    if shutil.which(exe) is None:
        raise KilnError(f"{exe!r} not found (scripts/setup.sh installs it)")
    proc = subprocess.run([exe, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise KilnError(f"{args[-1]}: {exe} failed: {proc.stderr.strip()}")
    return proc.stdout


def sections(elf: Path, target: Target) -> list[Section]:
    """The allocated sections of `elf` (objdump -h)."""
    text = _tool(target, "objdump", "-h", str(elf))
    found = re.findall(r"^\s*\d+\s+(\S+)\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)\s+[0-9a-f]+\s+\S+\n\s+(.*)$", text, re.M)
    return [Section(name, int(size, 16), int(vma, 16), int(lma, 16), "LOAD" in flags)
            for name, size, vma, lma, flags in found if "ALLOC" in flags]


def symbol_sizes(elf: Path, target: Target) -> list[tuple[str, int]]:
    """(name, size) of every sized symbol of `elf` (nm -S)."""
    rows = (line.split() for line in _tool(target, "nm", "-S", "--defined-only", str(elf)).splitlines())
    return [(r[3], int(r[1], 16)) for r in rows if len(r) == 4]


def _in(region: tuple[int, int], address: int) -> bool:
    return region[0] <= address < region[1]


def _in_any(regions: list[tuple[int, int]], address: int) -> bool:
    return any(_in(r, address) for r in regions)


def region_use(secs: list[Section], target: Target) -> dict[str, dict[str, int]]:
    """Bytes each memory region of the target holds: sections placed there, and the initial values loaded there."""
    use = {}
    for name, r in target.memory.items():
        span = (r.origin, r.origin + r.length)
        used = sum(s.size for s in secs if _in(span, s.address))
        used += sum(s.size for s in secs if s.loaded and s.load_address != s.address and _in(span, s.load_address))
        use[name] = {"used": used, "size": r.length}
    return use


def size_report(elf: Path) -> SizeReport:
    """The flash and RAM breakdown of one image, against its target's memory."""
    target = image_target(elf)
    flash = [(r.origin, r.origin + r.length) for r in (target.flash, target.rodata) if r]
    ram = (target.ram.origin, target.ram.origin + target.ram.length)
    secs = sections(elf, target)
    syms = symbol_sizes(elf, target)
    by_name = {s.name: s.size for s in secs}
    read_only = sum(s.size for s in secs if s.loaded and _in_any(flash, s.address))
    data = sum(s.size for s in secs if s.loaded and _in(ram, s.address))
    stack = by_name.get(".stack", 0)
    bss = sum(s.size for s in secs if not s.loaded and _in(ram, s.address)) - stack
    weights = sum(size for name, size in syms if WEIGHT_SYMBOL.fullmatch(name))
    code = by_name.get(".text", 0)
    sym = dict(syms)
    report = SizeReport(str(elf), code, weights, read_only - code - weights, data, bss,
                        sym.get("kiln_arena", 0), sym.get("kiln_io", 0), stack, target.name,
                        target.read_only_bytes, target.ram.length, region_use(secs, target))
    map_file = elf.with_suffix(".map")
    if map_file.is_file():
        report.parts = map_parts(map_file.read_text(), flash, ram)
    return report


_OUTPUT_SECTION = re.compile(r"^(\.\S+)(?:\s+0x[0-9a-f]+\s+0x[0-9a-f]+)?")
_INPUT_SECTION = re.compile(r"^ (\S+)\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+(\S.*)$")


def part_of(obj: str) -> str:
    """Which part of a firmware an object file of the link map belongs to."""
    if ".a(" in obj:
        return "libc"
    if "/_firmware_stubs/" in obj:
        return "kernels"
    if "/_runtime/" in obj:
        return "runtime"
    if any(f"/_{d}/" in obj for d in ("firmware", "cortex_m", "riscv32")) or obj.endswith("_models.o"):
        return "platform"
    return "model" if obj.endswith(".o") else "other"


def map_parts(text: str, flash: list[tuple[int, int]], ram: tuple[int, int]) -> dict[str, dict[str, int]]:
    """Flash and RAM bytes per part, from the input sections of a GNU ld map."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("Linker script and memory map")), 0)
    parts: dict[str, dict[str, int]] = {}
    output = ""
    i = start
    while i < len(lines):
        line = lines[i]
        if re.fullmatch(r" \S+", line) and i + 1 < len(lines):
            line = line + " " + lines[i + 1].strip()  # a long input section name wraps onto the next line
            i += 1
        i += 1
        head = _OUTPUT_SECTION.match(line)
        if head:
            output = head.group(1)
            continue
        item = _INPUT_SECTION.match(line)
        if not item or output not in (".text", ".rodata", ".kiln_weights", ".ARM.extab", ".ARM.exidx", ".data", ".bss",
                                                   ".rela.dyn"):
            continue
        address, size, obj = int(item.group(2), 16), int(item.group(3), 16), item.group(4)
        if obj == "linker stubs" or size == 0:
            continue
        entry = parts.setdefault(part_of(obj), {"flash": 0, "ram": 0})
        if _in_any(flash, address) or output == ".data":
            entry["flash"] += size
        if _in(ram, address):
            entry["ram"] += size
    return dict(sorted(parts.items()))


@dataclass(frozen=True)
class Budget:
    """What one model needs of a board, known before linking: RAM for its arena, I/O and the stack, flash for its
    weights and code."""

    model: str
    target: str
    arena: int
    io: int
    stack: int
    flash: int

    @property
    def ram(self) -> int:
        return self.arena + self.io + self.stack

    def problem(self, target: Target) -> str | None:
        """One line saying which memory the model overflows and by how much, or None when it may fit."""
        over = []
        if self.ram > target.ram.length:
            over.append(f"RAM needs {self.ram} bytes (arena {self.arena} + io {self.io} + stack {self.stack}) of "
                        f"{target.ram.length}, over by {self.ram - target.ram.length}")
        if self.flash > target.read_only_bytes:
            over.append(f"flash needs {self.flash} bytes (weights and code) of {target.read_only_bytes}, "
                        f"over by {self.flash - target.read_only_bytes}")
        if not over:
            return None
        return f"{self.model} does not fit {target.name} ({target.board}): {'; '.join(over)}"


def budget(model: str, target: Target, arena: int, io: int, flash: int) -> Budget:
    """A model's needs on `target` from its generated header's arena and I/O bytes and its object's read-only bytes.

    The platform (startup, harness, C library) needs some more of both: a
    model within the budget can still fail to link, with the linker's region
    overflow; a model beyond it never links.
    """
    return Budget(model, target.name, arena, io, target.stack, flash)


def render(reports: list[SizeReport]) -> str:
    cols = ["code", "weights", "constants", "data", "bss", "arena", "io", "stack", "flash", "ram"]
    width = max([len("image")] + [len(r.image) for r in reports]) + 2
    lines = [f"{'image':<{width}}" + "".join(f"{c:>10}" for c in cols) + f"  {'target':<11} {'flash %':>7} {'RAM %':>6}"]
    for r in reports:
        use = f"  {r.target:<11} {100 * r.flash / r.flash_size:>7.1f} {100 * r.ram / r.ram_size:>6.1f}"
        lines.append(f"{r.image:<{width}}" + "".join(f"{getattr(r, c):>10}" for c in cols) + use)
        if len(r.regions) > 2:  # the flash column spans two regions: each one's use apart
            lines += [f"  region {name}: {u['used']} of {u['size']} bytes ({100 * u['used'] / u['size']:.1f} %)"
                      for name, u in r.regions.items()]
        for part, b in r.parts.items():
            lines.append(f"{'  ' + part:<{width}}{'':>80}{b['flash']:>10}{b['ram']:>10}")
    return "\n".join(lines)


def to_json(reports: list[SizeReport]) -> list[dict]:
    return [dict(asdict(r), flash=r.flash, ram=r.ram, fits=r.fits) for r in reports]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kiln.target.size", description="Flash and RAM use of firmware images.")
    p.add_argument("paths", type=Path, nargs="+", help="ELF images, or folders searched for *.elf")
    p.add_argument("--json", type=Path, help="also write the reports as JSON")
    args = p.parse_args(argv)
    try:
        elves = [e for path in args.paths for e in (sorted(path.rglob("*.elf")) if path.is_dir() else [path])]
        if not elves:
            raise KilnError(f"{' '.join(map(str, args.paths))}: no firmware images")
        reports = [size_report(e) for e in elves]
    except KilnError as exc:
        print(f"kiln: error: {exc}", file=sys.stderr)
        return 1
    print(render(reports))
    if args.json:
        args.json.write_text(json.dumps(to_json(reports), indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
