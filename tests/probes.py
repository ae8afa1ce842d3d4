"""Running a hostile or faulty case as a user would, and the verdict a user needs.

Every probe runs its command as a child process in a session of its own, under a memory limit and a
timeout: a regression that hangs or eats memory fails its test instead of stalling the suite, and the
whole process group is killed (a stage child or a worker included) when the time is up. The verdicts:

- `clear_error`: a non-zero exit, no traceback, and a `kiln: error:` line (one per bad thing) naming what
  the test says it must name (a file, a model, a key, an operator);
- `succeeded`: exit 0 and no traceback (the test then checks the result is the correct one).
"""
from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

MEMORY_LIMIT = 6 << 30  # address space: torch and numpy map far more than they touch
TIMEOUT = 120.0


@dataclass(frozen=True)
class Probe:
    command: tuple[str, ...]
    returncode: int | None  # None: killed at the timeout
    stdout: str
    stderr: str

    @property
    def log(self) -> str:
        return f"$ {' '.join(self.command)}\n(exit {self.returncode})\n{self.stdout}{self.stderr}"

    @property
    def errors(self) -> list[str]:
        return [line for line in (self.stdout + self.stderr).splitlines() if line.startswith("kiln: error:")]


def _limits(memory: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))


def run(command: list[str | Path], cwd: Path, env: dict[str, str] | None = None, timeout: float = TIMEOUT,
        memory: int = MEMORY_LIMIT, stdin: bytes | None = None) -> Probe:
    """Run `command` (a list: no shell) in `cwd`; on timeout kill its whole process group and say so."""
    args = tuple(str(c) for c in command)
    proc = subprocess.Popen(args, cwd=cwd, env={**os.environ, **(env or {})}, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=lambda: _limits(memory))
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        code = None
    return Probe(args, code, out.decode(errors="replace"), err.decode(errors="replace"))


def kiln(*args: str | Path, cwd: Path, **kw) -> Probe:
    """The `kiln` command of this environment."""
    return run([sys.executable, "-m", "kiln", *args], cwd, **kw)


def scons(*args: str, cwd: Path, **kw) -> Probe:
    """`scons` of this environment, with fresh stage processes (a warm worker would outlive the probe)."""
    env = {"KILN_WORKERS": "0", **kw.pop("env", {})}
    return run([sys.executable, "-m", "SCons", *args], cwd, env=env, **kw)


def clear_error(probe: Probe, *names: str, lines: int | None = 1) -> str:
    """Assert `probe` failed as a user needs: no hang, a non-zero exit, no traceback, `lines` error lines (None: any
    number but at least one), the first naming each of `names`. Returns the first error line."""
    assert probe.returncode is not None, f"hang:\n{probe.log}"
    assert probe.returncode != 0, f"accepted:\n{probe.log}"
    assert "Traceback" not in probe.stdout + probe.stderr, f"traceback:\n{probe.log}"
    errors = probe.errors
    assert errors and (lines is None or len(errors) == lines), f"{len(errors)} error lines:\n{probe.log}"
    assert all(name in errors[0] for name in names), f"the error names not all of {names}:\n{probe.log}"
    return errors[0]


def succeeded(probe: Probe) -> Probe:
    """Assert `probe` finished with exit 0 and no traceback."""
    assert probe.returncode == 0 and "Traceback" not in probe.stdout + probe.stderr, probe.log
    return probe
