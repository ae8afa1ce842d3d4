"""Flash and RAM use of a Cortex-M firmware image, read from the ELF and its map file.

Flash is every loaded section in the flash region plus the initial values of
.data; RAM is .data, .bss (which holds the arena and the I/O buffers) and the
reserved stack. The generated weights are the `k_const*` arrays, wherever
`codegen.weights_section` put them. With the link map next to the image, the
flash and RAM bytes are also split by part: the model's generated code and
data, the kernels, the runtime, the platform (startup, harness, model table)
and the C library.

    python -m kiln.target.size [--json FILE] ELF_OR_FOLDER...
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

from kiln.errors import KilnError

FLASH = (0x00000000, 0x00400000)
RAM = (0x20000000, 0x20400000)
WEIGHT_SYMBOL = re.compile(r"k_const\d+")


@dataclass(frozen=True)
class Section:
    name: str
    size: int
    address: int
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
    parts: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def flash(self) -> int:
        return self.code + self.weights + self.constants + self.data

    @property
    def ram(self) -> int:
        return self.data + self.bss + self.stack


def _tool(name: str, *args: str) -> str:
    exe = f"arm-none-eabi-{name}"
    if shutil.which(exe) is None:
        raise KilnError(f"{exe!r} not found (scripts/setup.sh installs gcc-arm-none-eabi)")
    proc = subprocess.run([exe, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise KilnError(f"{args[-1]}: {exe} failed: {proc.stderr.strip()}")
    return proc.stdout


def sections(elf: Path) -> list[Section]:
    """The allocated sections of `elf` (objdump -h)."""
    text = _tool("objdump", "-h", str(elf))
    found = re.findall(r"^\s*\d+\s+(\S+)\s+([0-9a-f]+)\s+([0-9a-f]+)\s+[0-9a-f]+\s+[0-9a-f]+\s+\S+\n\s+(.*)$", text, re.M)
    return [Section(name, int(size, 16), int(vma, 16), "LOAD" in flags) for name, size, vma, flags in found if "ALLOC" in flags]


def symbol_sizes(elf: Path) -> list[tuple[str, int]]:
    """(name, size) of every sized symbol of `elf` (nm -S)."""
    rows = (line.split() for line in _tool("nm", "-S", "--defined-only", str(elf)).splitlines())
    return [(r[3], int(r[1], 16)) for r in rows if len(r) == 4]


def _in(region: tuple[int, int], address: int) -> bool:
    return region[0] <= address < region[1]


def size_report(elf: Path) -> SizeReport:
    """The flash and RAM breakdown of one image."""
    if not elf.is_file():
        raise KilnError(f"{elf}: no firmware image (build it with `scons target=cortex-m4`)")
    secs = sections(elf)
    syms = symbol_sizes(elf)
    by_name = {s.name: s.size for s in secs}
    read_only = sum(s.size for s in secs if s.loaded and _in(FLASH, s.address))
    data = sum(s.size for s in secs if s.loaded and _in(RAM, s.address))
    stack = by_name.get(".stack", 0)
    bss = sum(s.size for s in secs if not s.loaded and _in(RAM, s.address)) - stack
    weights = sum(size for name, size in syms if WEIGHT_SYMBOL.fullmatch(name))
    code = by_name.get(".text", 0)
    sym = dict(syms)
    report = SizeReport(str(elf), code, weights, read_only - code - weights, data, bss,
                        sym.get("kiln_arena", 0), sym.get("kiln_io", 0), stack)
    map_file = elf.with_suffix(".map")
    if map_file.is_file():
        report.parts = map_parts(map_file.read_text())
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
    if "/_cortex_m4/" in obj or obj.endswith("_models.o"):
        return "platform"
    return "model" if obj.endswith(".o") else "other"


def map_parts(text: str) -> dict[str, dict[str, int]]:
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
        if not item or output not in (".text", ".rodata", ".kiln_weights", ".ARM.extab", ".ARM.exidx", ".data", ".bss"):
            continue
        address, size, obj = int(item.group(2), 16), int(item.group(3), 16), item.group(4)
        if obj == "linker stubs" or size == 0:
            continue
        entry = parts.setdefault(part_of(obj), {"flash": 0, "ram": 0})
        if _in(FLASH, address) or output == ".data":
            entry["flash"] += size
        if _in(RAM, address):
            entry["ram"] += size
    return dict(sorted(parts.items()))


def render(reports: list[SizeReport]) -> str:
    cols = ["code", "weights", "constants", "data", "bss", "arena", "io", "stack", "flash", "ram"]
    width = max([len("image")] + [len(r.image) for r in reports]) + 2
    lines = [f"{'image':<{width}}" + "".join(f"{c:>10}" for c in cols)]
    for r in reports:
        lines.append(f"{r.image:<{width}}" + "".join(f"{getattr(r, c):>10}" for c in cols))
        for part, b in r.parts.items():
            lines.append(f"{'  ' + part:<{width}}{'':>80}{b['flash']:>10}{b['ram']:>10}")
    return "\n".join(lines)


def to_json(reports: list[SizeReport]) -> list[dict]:
    return [dict(asdict(r), flash=r.flash, ram=r.ram) for r in reports]


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
