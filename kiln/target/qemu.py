"""Run firmware images under QEMU, each on its target's board, and read their reports.

An image names the target it was linked for (`kiln.target.elf`), so it runs
on that target's QEMU machine (`targets.py`). QEMU runs with `-icount
shift=0` (one instruction per virtual nanosecond, so instruction counts are
exact and identical across runs) and semihosting for the harness's stdin,
stdout, stderr and exit status. Every run is bounded by coreutils `timeout`,
since a core that spins or locks up never exits. The report format is the one
`runtime/firmware/firmware_main.c` documents.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kiln.errors import KilnError
from kiln.ir.graph import DTYPES, Graph

from .elf import image_target
from .targets import Target
EXIT_FAULT = 128  # KILN_EXIT_FAULT in firmware.h: 128 + exception number
EXIT_MEANINGS = {1: "usage error", 2: "bad input stream", 3: "invoke failed", 4: "model does not fit the firmware's buffers"}
TIMED_OUT = (124, 137)  # coreutils timeout: TERM worked, or KILL was needed


@dataclass
class QemuRun:
    """One QEMU run: exit status, the harness's stdout (bytes) and stderr (text)."""

    status: int
    stdout: bytes
    stderr: str
    timed_out: bool

    @property
    def fault(self) -> str | None:
        """The harness's fault report line, when the firmware faulted."""
        match = re.search(r"^kiln fault: .*$", self.stderr, re.M)
        return match.group(0) if match else None


@dataclass
class LayerCount:
    sample: int
    index: int
    name: str
    instructions: int


@dataclass
class FirmwareRun:
    """Outputs and instruction counts of a firmware run over samples."""

    outputs: list[list[np.ndarray]]
    instructions: list[int]
    stack_bytes: int
    layers: list[LayerCount] = field(default_factory=list)
    report: str = ""  # the harness's whole report (with `tensors`, its `tensor` lines)


def qemu_command(elf: Path, args: list[str], timeout: float, target: Target) -> list[str]:
    """The command line that runs `elf` on `target`'s board with semihosting arguments `args`, bounded by `timeout` s."""
    semihosting_args = "".join(f",arg={a.replace(',', ',,')}" for a in [elf.name, *args])
    board = ["-M", target.machine] + (["-bios", "none"] if target.arch == "riscv" else [])
    return [
        "timeout", "--kill-after=2", f"{timeout:g}",
        target.qemu, *board, "-nographic", "-monitor", "none", "-serial", "none",
        "-icount", "shift=0", "-semihosting-config", f"enable=on,target=native{semihosting_args}",
        "-kernel", str(elf),
    ]


def run_elf(elf: Path, args: list[str] | None = None, stdin: bytes = b"", timeout: float = 60.0) -> QemuRun:
    """Run a firmware image on its target's board; a fault, a bad status or a timeout is reported in the result."""
    target = image_target(elf)
    for tool in ("timeout", target.qemu):
        if shutil.which(tool) is None:
            raise KilnError(f"{tool!r} not found (scripts/setup.sh installs it)")
    cmd = qemu_command(elf, list(args or []), timeout, target)
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(stdin, timeout=timeout + 10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    elapsed = time.monotonic() - start
    timed_out = proc.returncode in TIMED_OUT and elapsed >= timeout or proc.returncode < 0
    return QemuRun(proc.returncode, out, err.decode(errors="replace"), timed_out)


def check_run(elf: Path, run: QemuRun, timeout: float) -> None:
    """Raise a one-line KilnError unless the run exited with status 0."""
    if run.status == 0:
        return
    if run.fault:
        raise KilnError(f"{elf}: firmware fault (exit status {run.status}): {run.fault}")
    if run.timed_out:
        raise KilnError(f"{elf}: no exit within {timeout:g} s (the firmware hung or ran too long)")
    detail = run.stderr.strip().splitlines()
    meaning = EXIT_MEANINGS.get(run.status, "unexpected status")
    raise KilnError(f"{elf}: exited with status {run.status} ({meaning}){': ' + detail[-1] if detail else ''}")


def list_models(elf: Path, timeout: float = 30.0) -> list[str]:
    """Names of the models linked into `elf`, in table order."""
    run = run_elf(elf, ["--list"], timeout=timeout)
    check_run(elf, run, timeout)
    return [line.split(" arena=")[0] for line in run.stdout.decode().splitlines() if " arena=" in line]


def run_firmware(elf: Path, graph: Graph, samples: list[list[np.ndarray]], model: str | None = None,
                 layers: bool = False, timeout: float = 60.0, tensors: bool = False) -> FirmwareRun:
    """Run `elf` on raw samples (one list of input arrays each, as the model takes them).

    `graph` (the planned graph) gives the input and output tensors; `model`
    selects one model of a multi-model image; `layers` asks for per-layer counts, `tensors` for every
    layer's output (in the report's `tensor` lines, `kiln.check_layers`).
    """
    payload = b"".join(np.ascontiguousarray(a, DTYPES[graph.tensors[n].dtype]).tobytes()
                       for s in samples for n, a in zip(graph.inputs, s))
    args = (["--layers"] if layers else []) + (["--tensors"] if tensors else []) + ([model] if model else [])
    run = run_elf(elf, args, payload, timeout)
    check_run(elf, run, timeout)
    text = run.stdout.decode(errors="replace")
    result = parse_report(elf, text, graph, len(samples))
    result.report = text if tensors else ""
    return result


def parse_report(elf: Path, text: str, graph: Graph, count: int) -> FirmwareRun:
    """The outputs, instruction counts and stack use in a harness report of `count` samples."""
    outs = [graph.tensors[n] for n in graph.outputs]
    result = FirmwareRun(outputs=[], instructions=[], stack_bytes=-1)
    for line in text.splitlines():
        fields = dict(f.split("=", 1) for f in line.split(" ") if "=" in f)
        if line.startswith("sample="):
            if int(fields["sample"]) != len(result.outputs):
                raise KilnError(f"{elf}: report out of order at {line[:40]!r}")
            row = []
            for i, t in enumerate(outs):
                raw = bytes.fromhex(fields.get(f"out{i}", ""))
                if len(raw) != t.nbytes:
                    raise KilnError(f"{elf}: output {i} of sample {fields['sample']} has {len(raw)} bytes, expected {t.nbytes}")
                row.append(np.frombuffer(raw, DTYPES[t.dtype]).reshape(t.shape).copy())
            result.outputs.append(row)
            result.instructions.append(int(fields["instructions"]))
        elif line.startswith("layer "):
            head, name = line.split(" name=", 1)
            f = dict(x.split("=", 1) for x in head.split(" ")[1:])
            result.layers.append(LayerCount(int(f["sample"]), int(f["index"]), name, int(f["instructions"])))
        elif line.startswith("kiln-firmware inputs="):
            if (int(fields["inputs"]), int(fields["outputs"])) != (len(graph.inputs), len(outs)):
                raise KilnError(f"{elf}: the image's model has {fields['inputs']} inputs and {fields['outputs']} outputs, "
                                f"graph {graph.name!r} {len(graph.inputs)} and {len(outs)}")
        elif line.startswith("kiln-firmware end "):
            result.stack_bytes = int(fields["stack"])
    if len(result.outputs) != count or result.stack_bytes < 0:
        raise KilnError(f"{elf}: report has {len(result.outputs)} of {count} samples{'' if result.stack_bytes >= 0 else ' and no end line'}")
    return result
