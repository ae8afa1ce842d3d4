"""examples/platformio: its extra script loads Kiln's SCons tool into PlatformIO's SCons build and links the model
into a Cortex-M4 firmware. PlatformIO cannot download its platforms here, so `tests/platformio_main.py` stands in
for PlatformIO's own SConstruct (same variables, same order of extra scripts and platform script) and Debian's
arm-none-eabi GCC for PlatformIO's toolchain package."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from conftest import ROOT
from scons_matrix import parse_actions
from kiln.stages import STAGES

PIO_MAIN = ROOT / "tests/platformio_main.py"


def pio_run(project: Path, *args: str) -> subprocess.CompletedProcess:
    """What `pio run` runs: SCons with PlatformIO's SConstruct, in the project folder."""
    return subprocess.run([sys.executable, "-m", "SCons", "-Q", "-f", str(PIO_MAIN), *args], cwd=project,
                          capture_output=True, text=True, timeout=600)


def test_platformio_project_links_a_kiln_model_into_its_cortex_m_firmware(tmp_path):
    project = Path(shutil.copytree(ROOT / "examples/platformio", tmp_path / "project",
                                   ignore=shutil.ignore_patterns(".pio", "__pycache__")))
    proc = pio_run(project, "-j2")
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log
    actions, _ = parse_actions(log)
    assert {f"kiln {s.name} gesture" for s in STAGES} <= actions, log
    build = ".pio/build/nucleo_f446re"
    model_cc = next(line for line in log.splitlines() if line.startswith(f"arm-none-eabi-gcc -o {build}/kiln/gesture/gesture.o"))
    assert "-mcpu=cortex-m4" in model_cc and "-mfloat-abi=hard" in model_cc  # the platform's compiler and flags
    elf = project / build / "firmware.elf"
    symbols = subprocess.run(["arm-none-eabi-nm", str(elf)], capture_output=True, text=True, check=True).stdout
    assert {"gesture_invoke", "main", "kiln_conv2d_s8"} <= {line.split()[-1] for line in symbols.splitlines()}
    again = pio_run(project)
    assert again.returncode == 0 and not [a for a in parse_actions(again.stdout)[0] if a.startswith("kiln ")], again.stdout
    assert "Kiln models" in pio_run(project, "-h").stdout
