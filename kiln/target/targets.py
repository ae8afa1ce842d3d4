"""The firmware targets as data: one table per core, naming its compiler flags, QEMU board and memory map.

Everything a build, a run or a size check needs to know about a target is
here, and nothing else in Kiln names a core: the cross build
(`kiln.target.cortex_m`), the QEMU runner (`kiln.target.qemu`), the size
report and the SCons tool read these tables. Memory sizes are the boards'
real ones as QEMU 7.2 maps them, so a model that does not fit the board
does not link. Standard library only: the SCons tool loads this module.

The instruction counter: under QEMU's `-icount shift=0` every instruction
advances the virtual clock by 1 ns. The Arm harness reads SysTick, clocked
at the board's `clock_hz`, so one tick is 10^9 / clock_hz instructions (a
fraction on some boards: the count is then exact to one tick); RISC-V reads
`minstret`, one count per instruction.

The memory map is a region per purpose: `flash` where the core boots (the
vector table) and the code runs from, `ram` for the stack and the data, and,
on a board whose boot memory is too small for the weights, `rodata` for the
constants and weights (the M55's ITCM is 512 KB; the zoo's weights are more
than twice that, so they go to the AN547's 8 MB QSPI flash). The linker
script's MEMORY is these regions (`cortex_m.linker_script`), and the size
report measures an image against each of them.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction


@dataclass(frozen=True)
class Region:
    """A memory region of the board: where it is and how many bytes it holds."""

    origin: int
    length: int
    what: str


@dataclass(frozen=True)
class Target:
    """One firmware target: a core on a board that QEMU emulates."""

    name: str
    core: str                  # what the core is, for people
    board: str                 # the board QEMU emulates, for people
    arch: str                  # "arm" or "riscv": the toolchain, startup code and semihosting trap
    machine: str               # QEMU's -M
    cpu_flags: tuple[str, ...]  # compile and link flags that pick the core and its ABI
    flash: Region              # vector table, code, .data's initial values; constants and weights unless `rodata`
    ram: Region                # stack, .data, .bss (arena and I/O buffers)
    stack: int                 # bytes of stack reserved by default
    clock_hz: int              # the tick counter's clock (SysTick's on Arm); 10^9 for minstret
    mpu: str                   # the stack guard: "v7m" or "v8m" MPU layout, or "none"
    features: str              # the kernel path the compiler's feature macros select, for people
    rodata: Region | None = None  # constants and weights (.rodata, .kiln_weights), when not in `flash`

    @property
    def memory(self) -> dict[str, Region]:
        """The linker script's memory regions by name: FLASH, RODATA when the board has one, RAM."""
        return {"FLASH": self.flash, **({"RODATA": self.rodata} if self.rodata else {}), "RAM": self.ram}

    @property
    def read_only_bytes(self) -> int:
        """How much code, constants and weights the board holds: flash, plus the constants' own region if any."""
        return self.flash.length + (self.rodata.length if self.rodata else 0)

    @property
    def toolchain(self) -> str:
        """The prefix of the cross tools (gcc, objdump, nm)."""
        return "arm-none-eabi-" if self.arch == "arm" else "riscv64-unknown-elf-"

    @property
    def qemu(self) -> str:
        return "qemu-system-arm" if self.arch == "arm" else "qemu-system-riscv32"

    @property
    def instructions_per_tick(self) -> Fraction:
        return Fraction(10**9, self.clock_hz)

    @property
    def platform(self) -> str:
        """The runtime/ folder holding the startup code and the section layout of the linker script."""
        return "cortex_m" if self.arch == "arm" else "riscv32"


KB, MB = 1024, 1024 * 1024
# MPS2 boards (AN385, AN386, AN500): ZBT SSRAM1 is the code memory, SSRAM2/3 the data memory; SysTick at 25 MHz.
MPS2_FLASH = Region(0x00000000, 4 * MB, "ZBT SSRAM1")
MPS2_RAM = Region(0x20000000, 4 * MB, "ZBT SSRAM2/3")
ARM_HARD_SP = ("-mthumb", "-mfloat-abi=hard")

TARGETS: dict[str, Target] = {t.name: t for t in [
    Target("cortex-m0", "Arm Cortex-M0 (Armv6-M: no DSP, no hardware divide, no unaligned access)",
           "BBC micro:bit (nRF51822)", "arm", "microbit", ("-mcpu=cortex-m0", "-mthumb", "-mfloat-abi=soft"),
           Region(0x00000000, 256 * KB, "nRF51 flash"), Region(0x20000000, 16 * KB, "nRF51 SRAM"),
           stack=2 * KB, clock_hz=16_000_000, mpu="none", features="portable C"),
    Target("cortex-m3", "Arm Cortex-M3 (Armv7-M: no DSP)", "Arm MPS2 AN385", "arm", "mps2-an385",
           ("-mcpu=cortex-m3", "-mthumb", "-mfloat-abi=soft"), MPS2_FLASH, MPS2_RAM,
           stack=32 * KB, clock_hz=25_000_000, mpu="v7m", features="portable C"),
    Target("cortex-m4", "Arm Cortex-M4F (Armv7E-M: DSP, FPv4-SP)", "Arm MPS2 AN386", "arm", "mps2-an386",
           ("-mcpu=cortex-m4", *ARM_HARD_SP, "-mfpu=fpv4-sp-d16"), MPS2_FLASH, MPS2_RAM,
           stack=32 * KB, clock_hz=25_000_000, mpu="v7m", features="DSP (SMLAD)"),
    Target("cortex-m7", "Arm Cortex-M7 (Armv7E-M: DSP, FPv5-D16)", "Arm MPS2 AN500", "arm", "mps2-an500",
           ("-mcpu=cortex-m7", *ARM_HARD_SP, "-mfpu=fpv5-d16"), MPS2_FLASH, MPS2_RAM,
           stack=32 * KB, clock_hz=25_000_000, mpu="v7m", features="DSP (SMLAD)"),
    # SSE-200 boots in the Secure state from 0x10000000: the Secure aliases of SSRAM1 (code) and SSRAM2/3 (data).
    Target("cortex-m33", "Arm Cortex-M33 (Armv8-M Mainline: DSP, FPv5-SP, TrustZone)", "Arm MPS2 AN505 (SSE-200)",
           "arm", "mps2-an505", ("-mcpu=cortex-m33", *ARM_HARD_SP, "-mfpu=fpv5-sp-d16"),
           Region(0x10000000, 4 * MB, "ZBT SSRAM1, Secure alias"), Region(0x38000000, 4 * MB, "ZBT SSRAM2/3, Secure alias"),
           stack=32 * KB, clock_hz=20_000_000, mpu="v8m", features="DSP (SMLAD)"),
    # SSE-300 boots in the Secure state from the ITCM, which keeps the code; the data memory is ISRAM0/1; the
    # constants and weights are in the QSPI flash (QEMU maps it as ROM, behind an MPC that passes Secure reads).
    Target("cortex-m55", "Arm Cortex-M55 (Armv8.1-M: Helium MVE, FPv5)", "Arm MPS3 AN547 (SSE-300)",
           "arm", "mps3-an547", ("-mcpu=cortex-m55", *ARM_HARD_SP),
           Region(0x10000000, 512 * KB, "ITCM, Secure alias"), Region(0x31000000, 4 * MB, "ISRAM0/1, Secure alias"),
           stack=32 * KB, clock_hz=32_000_000, mpu="v8m", features="Helium (MVE)",
           rodata=Region(0x38000000, 8 * MB, "QSPI flash, Secure alias")),
    # The virt board has no flash: the image's read-only part sits at the start of its DRAM.
    Target("riscv32", "RISC-V RV32IMAC", "QEMU virt (RV32)", "riscv", "virt",
           ("-march=rv32imac", "-misa-spec=2.2", "-mabi=ilp32", "-mcmodel=medany"),
           Region(0x80000000, 4 * MB, "DRAM, read-only part"), Region(0x80400000, 4 * MB, "DRAM"),
           stack=32 * KB, clock_hz=10**9, mpu="none", features="portable C"),
]}
DEFAULT = "cortex-m4"


def target(name: str) -> Target:
    """The target called `name`; an unknown name is a one-line error listing the known ones."""
    found = TARGETS.get(name)
    if found is None:
        from .. import errors

        raise errors.KilnError(f"unknown target {name!r}{errors.did_you_mean(str(name), TARGETS)} (targets: {', '.join(TARGETS)})")
    return found
