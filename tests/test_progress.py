"""The build's progress display (`kiln/progress.py`): `[k/n]`, each running model's stage with its calibration, an ETA;
plain bounded lines in a log, one status line on a terminal that no output line ever lands on; stages report through
a descriptor that changes no artifact and no signature."""
from __future__ import annotations

import fcntl
import io
import os
import pty
import re
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

import numpy as np
import pyte
import pytest

from conftest import copy_repo
from scons_matrix import CALIBRATION_FILE, add_onnx_model, parse_actions, set_key
from kiln import progress, worker
from kiln.progress import Display, Running, Snapshot, Terminal, estimate, status
from kiln.stages import STAGES

MODELS = ("alpha", "beta")
STAGE = "|".join(s.name for s in STAGES)
# `kiln: [k/n] RUNNING...; about T left`, RUNNING being `MODEL STAGE (notes)` separated by ", "
LINE = re.compile(r"^kiln: \[(\d+)/(\d+)\](?: (.*?))?(?:;? ?about (\d+ s|\d+ min) left)?$")
ENTRY = re.compile(rf"(\w+) ({STAGE})(?: \(([^)]*)\))?(?:, |$)")
CALIBRATING = re.compile(r"(?:\d+ s, )?calibrating (\d+)/2048 samples, (\d+)%$")


# -- the parts --------------------------------------------------------------------------------
def running(stage: str, start: float, calibration=None, calibration_start: float = 0.0) -> Running:
    return Running("m", stage, start, None, calibration=calibration, calibration_start=calibration_start)


def test_the_estimate_is_the_larger_of_the_work_spread_over_the_jobs_and_the_longest_chain():
    durations = {"import": [4.0, 6.0], "quantize": [3.0]}  # overall mean 13/3
    pending = [("a", "normalize"), ("a", "quantize"), ("b", "quantize")]
    # a: normalize has no time yet (the overall mean), quantize 3; b: quantize 3 and its running import (5 - 2 s done)
    runs = {"b": running("import", start=8.0)}
    assert estimate(pending, runs, durations, jobs=2, now=10.0) == pytest.approx(max((13 / 3 + 3 + 3 + 3) / 2, 13 / 3 + 3))
    assert estimate(pending, runs, durations, jobs=8, now=10.0) == pytest.approx(13 / 3 + 3)  # a's chain bounds it
    # a calibration 25% through after 2 s has 6 s left, whatever the stage's mean says
    runs = {"b": running("quantize", start=0.0, calibration=(1, 4, 1, 1), calibration_start=8.0)}
    assert estimate([], runs, durations, jobs=1, now=10.0) == pytest.approx(6.0)
    assert estimate(pending, {}, {}, jobs=1, now=0.0) is None  # nothing measured yet: no estimate


def test_the_status_line_names_each_running_model_and_stage_with_its_calibration():
    snap = Snapshot(5, 12, [])
    runs = {"a": Running("kws", "quantize", 0.0, None, calibration=(1200, 4000, 2, 2), calibration_start=1.0),
            "b": Running("vww", "import", 9.5, None)}
    assert status(snap, runs, 75.0, now=10.0) == ("kiln: [5/12] kws quantize (10 s, calibrating pass 2/2, 1200/4000 "
                                                  "samples, 65%), vww import; about 1 min left")
    assert status(snap, {}, None, now=10.0) == "kiln: [5/12]"


def test_only_well_formed_calibration_reports_are_taken():
    assert progress._calibration(b"calibrate 3 10 1 2") == (3, 10, 1, 2)
    for bad in (b"calibrate 11 10 1 1", b"calibrate 1 0 1 1", b"calibrate 1 10 3 2", b"calibrate -1 10 1 1",
                b"calibrate 1 10 1", b"hello 1 2 3 4", b"calibrate \x1b[2J 10 1 1"):
        assert progress._calibration(bad) is None


def test_a_log_gets_a_bounded_number_of_lines_after_the_delay():
    out, now = io.StringIO(), [0.0]
    snap = Snapshot(0, 100, [])
    display = Display("log", 2, lambda: snap, out, delay=2.0, clock=lambda: now[0])
    for k in range(1, 101):
        snap.started = k
        now[0] += 0.5  # a stage every half second: 50 s
        channel = display.start(("root", "m"), "m", "plan")
        display.finish(("root", "m"), "plan", 0.5)
        os.close(channel)
    display.close()
    lines = out.getvalue().splitlines()
    assert 5 <= len(lines) <= 10 and "\r" not in out.getvalue(), lines  # tenths, at least LOG_EVERY_S apart
    assert all(LINE.match(line) for line in lines) and lines[-1].startswith("kiln: [100/100] m plan; about")


def render(raw: bytes, rows: int = 6, columns: int = 40) -> pyte.HistoryScreen:
    screen = pyte.HistoryScreen(columns, rows, history=1000)
    pyte.ByteStream(screen).feed(raw)
    return screen


def test_the_terminal_status_line_stays_on_the_bottom_row_below_scrolling_output():
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 6, 40, 0, 0))
    terminal = Terminal(slave)
    for i in range(12):
        os.write(slave, f"line {i}\n".encode())
        terminal.draw(f"kiln: [{i}/12] status")
    raw = drain(master)
    screen = render(raw)
    assert screen.display[-1].rstrip() == "kiln: [11/12] status"
    assert [line.rstrip() for line in screen.display[:-1]] == [f"line {i}" for i in range(8, 12)] + [""]
    terminal.close()
    os.write(slave, b"after\n")
    screen = render(raw + drain(master))
    lines = [line.rstrip() for line in screen.display]
    assert "kiln: [11/12] status" not in lines and "after" in lines  # removed, and the whole screen scrolls again
    os.close(master), os.close(slave)


def drain(fd: int) -> bytes:
    """What `fd` holds now (until it has nothing for a fifth of a second, or ends)."""
    data = b""
    while select.select([fd], [], [], 0.2)[0]:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    return data


# -- a build -----------------------------------------------------------------------------------
@pytest.fixture
def two_models(tmp_path: Path) -> Path:
    """alpha and beta, small ONNX models each calibrated on all of 2048 samples (8 batches)."""
    repo = copy_repo(tmp_path / "repo", ())
    for name in MODELS:
        add_onnx_model(repo / "models" / name)
        set_key(repo / "models" / name / "model.toml", "quant", "max_samples", 0)
        samples = np.random.default_rng(1).random((2048, 1, 3, 16, 16), dtype=np.float32)
        np.save(repo / "models" / name / CALIBRATION_FILE, samples)
    return repo


@pytest.fixture
def worker_folder(monkeypatch):
    folder = Path(tempfile.mkdtemp(prefix="kw"))
    yield folder
    worker.stop_all(folder)
    shutil.rmtree(folder, ignore_errors=True)


def scons_env(**settings: str) -> dict[str, str]:
    return {**os.environ, "KILN_WORKERS": "0", **settings}


def artifacts(repo: Path) -> dict[str, bytes]:
    return {str(p.relative_to(repo)): p.read_bytes() for p in sorted((repo / "build/host").rglob("*")) if p.is_file()}


def check_progress_lines(log: str) -> list[str]:
    """Every progress line of a build log, each checked against the action lines before it."""
    started: set[tuple[str, str]] = set()
    calibrated: dict[str, int] = {}
    lines = []
    for line in log.splitlines():
        action = re.match(rf"^\[\d+/\d+\] kiln ({STAGE}) (\w+)$", line)
        if action:
            started.add((action[2], action[1]))
        if not line.startswith("kiln: ["):
            continue
        match = LINE.match(line)
        assert match and int(match[1]) <= int(match[2]) <= 12, line
        entries = ENTRY.findall(match[3] or "")
        assert ", ".join(f"{m} {s}" + (f" ({n})" if n else "") for m, s, n in entries) == (match[3] or ""), line
        for model, stage, notes in entries:
            assert (model, stage) in started, line  # a stage the build has started
            calibrating = CALIBRATING.search(notes)
            if calibrating:
                assert stage == "quantize" and int(calibrating[1]) >= calibrated.get(model, 0), line
                calibrated[model] = int(calibrating[1])
        lines.append(line)
    assert set(calibrated) == set(MODELS), log  # both models' calibrations were shown
    return lines


def test_two_models_under_j2_in_a_log_then_on_a_terminal_then_without_progress_build_the_same_bytes(
        two_models, worker_folder):
    repo = two_models
    # A log (not a terminal), stages in warm workers: the descriptor goes with each request.
    proc = subprocess.run([sys.executable, "-m", "SCons", "-Q", "-j2", "KILN_PROGRESS=1"], cwd=repo, capture_output=True,
                          text=True, timeout=600, env=scons_env(KILN_WORKERS="1", KILN_WORKER_DIR=str(worker_folder)))
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "\r" not in log and "Traceback" not in log, log
    actions, unknown = parse_actions(log)
    assert not unknown and {a for a in actions if a.startswith("kiln ")} == {
        f"kiln {s.name} {m}" for s in STAGES for m in MODELS}, log
    lines = check_progress_lines(log)
    assert len(lines) <= 10 + 2 * 10, log  # tenths of the build, tenths of each calibration
    with_progress = artifacts(repo)

    # The setting is no part of any signature: nothing to do.
    proc = subprocess.run([sys.executable, "-m", "SCons", "-Q", "KILN_PROGRESS=0"], cwd=repo, capture_output=True,
                          text=True, timeout=600, env=scons_env())
    assert proc.returncode == 0 and not [a for a in parse_actions(proc.stdout)[0] if a.startswith("kiln ")], proc.stdout

    # On a terminal: one status line on the bottom row; the output scrolls above it, whole.
    clean(repo)
    raw, statuses, returncode = run_in_terminal(repo, rows=24, columns=4000)
    assert returncode == 0
    screen = render(raw, rows=24, columns=4000)
    output = [line.rstrip() for line in [*("".join(row[x].data for x in range(4000)) for row in screen.history.top),
                                         *screen.display]]
    text = "\n".join(output).strip("\n")
    actions, unknown = parse_actions(text)
    assert not unknown, text  # no line garbled by the status line
    assert sorted(line for line in output if re.match(r"^\[\d+/\d+\] kiln ", line)) == sorted(
        f"[{k}/{n}] kiln {s} {m}" for k, n, s, m in re.findall(rf"^\[(\d+)/(\d+)\] kiln ({STAGE}) (\w+)$", text, re.M))
    assert {a for a in actions if a.startswith("kiln ")} == {f"kiln {s.name} {m}" for s in STAGES for m in MODELS}
    assert not any(line.startswith("kiln: [") for line in output), text  # the status line never entered the output
    shown = [s for s in statuses if s]
    assert shown and all(LINE.match(s) for s in shown), statuses
    notes = [n for line in shown for _, _, n in ENTRY.findall(LINE.match(line)[3] or "")]
    assert any(CALIBRATING.search(n) for n in notes), statuses  # a calibration's progress was on the status line
    assert artifacts(repo) == with_progress

    # No display at all, fresh processes: the same bytes.
    clean(repo)
    proc = subprocess.run([sys.executable, "-m", "SCons", "-Q", "-j2"], cwd=repo, capture_output=True, text=True,
                          timeout=600, env=scons_env(KILN_PROGRESS="0"))
    assert proc.returncode == 0 and "kiln: [" not in proc.stdout, proc.stdout
    assert artifacts(repo) == with_progress


def clean(repo: Path) -> None:
    """Back to a fresh clone's state: no build folder, no SCons database."""
    shutil.rmtree(repo / "build")
    for database in repo.glob(".sconsign*"):
        database.unlink()


def run_in_terminal(repo: Path, rows: int, columns: int) -> tuple[bytes, list[str], int]:
    """`scons -Q -j2 KILN_PROGRESS=1` on a pseudo-terminal: everything it wrote, the bottom rows seen, its status."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "SCons", "-Q", "-j2", "KILN_PROGRESS=1"], cwd=repo, stdin=slave,
                            stdout=slave, stderr=slave, env=scons_env(TERM="xterm"))
    os.close(slave)
    screen = pyte.Screen(columns, rows)
    stream = pyte.ByteStream(screen)
    raw, statuses = b"", []
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if not select.select([master], [], [], 0.5)[0]:
            if proc.poll() is not None:
                break
            continue
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the terminal closed: the build ended
            break
        if not chunk:
            break
        raw += chunk
        stream.feed(chunk)
        statuses.append(screen.display[-1].rstrip())
    os.close(master)
    return raw, statuses, proc.wait(timeout=60)


def test_a_stage_run_by_the_build_reports_calibration_on_its_descriptor_and_draws_nothing(monkeypatch, capsys):
    from kiln.quantize.calibration import Progress

    read, write = os.pipe()
    monkeypatch.setenv("KILN_PROGRESS_FD", str(write))
    monkeypatch.delenv("KILN_PROGRESS", raising=False)
    now = [0.0]
    calibration = Progress("kws", 400, 2, clock=lambda: now[0])
    for index in range(2):
        for done in range(100, 401, 100):
            now[0] += 0.06  # reports a tenth of a second apart at least, and always the last one
            calibration.update(index, done)
    calibration.close()
    os.close(write)
    reports = drain(read).decode().splitlines()
    os.close(read)
    assert reports == ["calibrate 100 400 1 2", "calibrate 300 400 1 2", "calibrate 100 400 2 2", "calibrate 300 400 2 2",
                       "calibrate 400 400 2 2"]
    assert capsys.readouterr().err == ""  # outside the build (no descriptor) it would draw on stderr
