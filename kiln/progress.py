"""The build's progress display: one for the whole build, owned by the SCons process.

It shows `[k/n]` (k stage actions started or taken from the cache, of the n
the build runs as far as SCons has found out: a stage it finds up to date
leaves n), each running stage by model, a calibration's progress inside
`quantize` (which the stage reports on a pipe: `PROGRESS_FD_ENV` in
`kiln/stages.py`), and the time left, estimated from the durations of the
stages this build has run so far.

- On a terminal: one status line on the bottom row, below a scrolling region
  that holds everything else (as apt shows dpkg's progress). No output line,
  SCons's, a compiler's or a stage's, lands on it or is cut by it; it is
  redrawn a few times a second and removed when the build ends.
- In a log (standard output is not a terminal: CI, a file): plain lines
  `kiln: [k/n] ...`, at most one per tenth of the build's stage actions (and
  LOG_EVERY_S apart) and one per tenth of each calibration, and none in a
  build's first DELAY_S (so a short build prints no progress at all).

`KILN_PROGRESS=1` shows it from the start, `KILN_PROGRESS=0` not at all.
Standard library only: the SCons process loads it with the registry.
"""
from __future__ import annotations

import os
import select
import threading
import time
from dataclasses import dataclass
from typing import Callable, TextIO

DELAY_S = 2.0  # a build (and a calibration) shorter than this shows no progress
REDRAW_S = 0.2
LOG_EVERY_S = 5.0  # in a log, the build's progress lines are at least this far apart
SHOW_ELAPSED_S = 2.0  # a running stage shows its time once it has run this long


@dataclass
class Snapshot:
    """Where the build is: `started` of `total` stage actions, and the stages still to run as (model key, stage)."""

    started: int
    total: int
    pending: list[tuple[object, str]]


@dataclass
class Running:
    """A running stage action, and what it reported of its calibration."""

    label: str  # how the display names the model
    stage: str
    start: float
    fd: int | None  # the read end of its progress pipe, until the stage closes it
    buffer: bytes = b""
    calibration: tuple[int, int, int, int] | None = None  # samples done, samples, pass, passes
    calibration_start: float = 0.0
    tenths: int = 0  # log lines shown for its calibration

    def fraction(self) -> float | None:
        """How much of its calibration is done (all passes), when it has reported."""
        if self.calibration is None:
            return None
        done, samples, index, passes = self.calibration
        return ((index - 1) * samples + done) / (samples * passes)


def mode(setting: str | None, stream: TextIO) -> str:
    """"off" (KILN_PROGRESS=0), "tty" (a terminal that can keep a status line) or "log"."""
    if setting == "0":
        return "off"
    try:
        terminal = stream.isatty() and os.get_terminal_size(stream.fileno()).lines >= 3
    except (AttributeError, OSError, ValueError):
        terminal = False
    return "tty" if terminal and os.environ.get("TERM", "dumb") not in ("", "dumb") else "log"


def estimate(pending: list[tuple[object, str]], running: dict[object, Running], durations: dict[str, list[float]],
             jobs: int, now: float) -> float | None:
    """Seconds left: the larger of the work left spread over `jobs` and the longest model's chain (its stages run one
    after another). A stage is expected to take its mean duration in this build so far (any stage's mean while it has
    none); a calibrating stage, its calibration's time so far scaled by what is left. None before any stage ended."""
    measured = [t for times in durations.values() for t in times]
    if not measured:
        return None
    overall = sum(measured) / len(measured)

    def expected(stage: str) -> float:
        times = durations.get(stage)
        return sum(times) / len(times) if times else overall

    per_model: dict[object, float] = {}
    for key, r in running.items():
        fraction = r.fraction()
        if fraction:
            left = (now - r.calibration_start) * (1 - fraction) / fraction
        else:
            left = max(expected(r.stage) - (now - r.start), 0.0)
        per_model[key] = per_model.get(key, 0.0) + left
    for key, stage in pending:
        per_model[key] = per_model.get(key, 0.0) + expected(stage)
    return max(sum(per_model.values()) / max(jobs, 1), max(per_model.values(), default=0.0))


def duration(seconds: float) -> str:
    if seconds < 60:
        return f"{max(1, round(seconds))} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def status(snap: Snapshot, running: dict[object, Running], left: float | None, now: float) -> str:
    """The one line the display shows: `kiln: [k/n] MODEL STAGE (...), ...; about T left`."""
    parts = []
    for r in sorted(running.values(), key=lambda r: r.start):
        notes = [duration(now - r.start)] if now - r.start >= SHOW_ELAPSED_S else []
        if r.calibration is not None:
            done, samples, index, passes = r.calibration
            where = f"pass {index}/{passes}, " if passes > 1 else ""
            notes.append(f"calibrating {where}{done}/{samples} samples, {int(100 * r.fraction())}%")
        parts.append(f"{r.label} {r.stage}" + (f" ({', '.join(notes)})" if notes else ""))
    text = ", ".join(parts)
    if left is not None:
        text += ("; " if text else "") + f"about {duration(left)} left"
    return f"kiln: [{snap.started}/{snap.total}] {text}".rstrip()


class Terminal:
    """A status line on a terminal's bottom row, kept out of the scrolling region that everything else is written in.

    Every drawing is one write: save the cursor, go to the bottom row, draw,
    restore the cursor. Writes to a terminal do not interleave with other
    processes' writes, and the cursor, wherever output left it, never moves.
    """

    SAVE, RESTORE = "\x1b7", "\x1b8"

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.rows = 0  # the rows the scrolling region was set up for; 0: not set up
        self.shown = ""

    def draw(self, text: str) -> None:
        try:
            columns, rows = os.get_terminal_size(self.fd)
        except OSError:
            return
        if rows < 3 or (rows == self.rows and text == self.shown):
            return
        self.shown = text
        out = ""
        if rows != self.rows:
            if self.rows:
                out += self._clear(self.rows)
            # Make room: a line feed that keeps the column (index) scrolls when the cursor is on the bottom row.
            out += "\x1bD\x1b[1A" + self.SAVE + f"\x1b[1;{rows - 1}r" + self.RESTORE
            self.rows = rows
        self._write(out + self.SAVE + f"\x1b[{rows};1H\x1b[2K" + text[:columns - 1] + self.RESTORE)

    def close(self) -> None:
        """Remove the status line and give the whole screen back to scrolling."""
        if self.rows:
            self._write(self._clear(self.rows) + self.SAVE + "\x1b[r" + self.RESTORE)
            self.rows = 0

    def _clear(self, row: int) -> str:
        return self.SAVE + f"\x1b[{row};1H\x1b[2K" + self.RESTORE

    def _write(self, text: str) -> None:
        data = text.encode("utf-8", "replace")
        try:
            while data:
                data = data[os.write(self.fd, data):]
        except OSError:
            pass


class Display:
    """The build's progress: stage actions start and end (`start`, `finish`), stages report on pipes, a thread shows it.

    `snapshot` tells where the build is; it is called under the display's lock,
    from the build's threads and the display's own.
    """

    def __init__(self, how: str, jobs: int, snapshot: Callable[[], Snapshot], out: TextIO,
                 delay: float = DELAY_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.how, self.jobs, self.snapshot, self.out, self.delay, self.clock = how, jobs, snapshot, out, delay, clock
        self.terminal = Terminal(out.fileno()) if how == "tty" else None
        self.running: dict[object, Running] = {}
        self.durations: dict[str, list[float]] = {}
        self.closing: list[int] = []  # read ends the display thread closes (never while it may wait on them)
        self.lock = threading.RLock()
        self.began: float | None = None
        self.tenths = 0  # log lines shown at tenths of the build's stage actions
        self.logged = float("-inf")  # when the last of them was shown
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self, key: object, label: str, stage: str) -> int | None:
        """A stage action of model `key` starts; the descriptor its stage reports progress to (None: no display)."""
        if self.how == "off":
            return None
        read, write = os.pipe()
        with self.lock:
            now = self.clock()
            if self.began is None:
                self.began = now
                self.thread = threading.Thread(target=self._loop, name="kiln progress", daemon=True)
                self.thread.start()
            self.running[key] = Running(label, stage, now, read)
            if self.how == "log":
                snap = self.snapshot()
                tenth = int(10 * snap.started / max(snap.total, 1))
                if tenth > self.tenths and self._shown(now) and now - self.logged >= LOG_EVERY_S:
                    self.tenths, self.logged = tenth, now
                    self._line(snap, now)
        return write

    def finish(self, key: object, stage: str, seconds: float) -> None:
        """A stage action of model `key` ended (or failed) after `seconds`."""
        with self.lock:
            self.durations.setdefault(stage, []).append(seconds)
            r = self.running.pop(key, None)
            if r is not None and r.fd is not None:
                self.closing.append(r.fd)

    def close(self) -> None:
        """Stop showing progress (the build ended); the terminal gets its whole screen back."""
        self.stopped.set()
        if self.thread is not None:
            self.thread.join(timeout=2.0)
        with self.lock:
            if self.terminal is not None:
                self.terminal.close()
            for r in self.running.values():
                if r.fd is not None:
                    self.closing.append(r.fd)
            self._close_finished()

    def _shown(self, now: float) -> bool:
        return self.began is not None and now - self.began >= self.delay

    def _line(self, snap: Snapshot, now: float) -> None:
        self.out.write(status(snap, self.running, estimate(snap.pending, self.running, self.durations, self.jobs, now),
                              now) + "\n")
        self.out.flush()

    def _loop(self) -> None:
        while not self.stopped.is_set():
            with self.lock:
                self._close_finished()
                fds = {r.fd: key for key, r in self.running.items() if r.fd is not None}
            try:
                ready = select.select(list(fds), [], [], REDRAW_S)[0] if fds else []
            except (OSError, ValueError):
                ready = []
            if not fds:
                self.stopped.wait(REDRAW_S)
            with self.lock:
                now = self.clock()
                for fd in ready:
                    self._read(fds[fd], fd, now)
                if self.terminal is not None and self._shown(now) and not self.stopped.is_set():
                    snap = self.snapshot()
                    left = estimate(snap.pending, self.running, self.durations, self.jobs, now)
                    self.terminal.draw(status(snap, self.running, left, now) if self.running or left else "")

    def _read(self, key: object, fd: int, now: float) -> None:
        r = self.running.get(key)
        if r is None or r.fd != fd:
            return  # it finished meanwhile: its pipe is closing
        try:
            data = os.read(fd, 4096)
        except OSError:
            data = b""
        if not data:  # the stage closed it (it ended)
            r.fd = None
            self.closing.append(fd)
            return
        *lines, r.buffer = (r.buffer + data).split(b"\n")
        r.buffer = r.buffer[-256:]  # a line is a few dozen bytes; more is not a report
        for line in lines:
            report = _calibration(line)
            if report is None:
                continue
            if r.calibration is None:
                r.calibration_start = now
            r.calibration = report
            tenth = int(10 * r.fraction())
            if self.how == "log" and tenth > r.tenths and now - r.start >= self.delay:
                r.tenths = tenth
                self._line(self.snapshot(), now)

    def _close_finished(self) -> None:
        for fd in self.closing:
            try:
                os.close(fd)
            except OSError:
                pass
        self.closing.clear()


def _calibration(line: bytes) -> tuple[int, int, int, int] | None:
    """`calibrate DONE SAMPLES PASS PASSES` (kiln/quantize/calibration.py), checked; None for anything else."""
    fields = line.split()
    if len(fields) != 5 or fields[0] != b"calibrate" or not all(f.isdigit() for f in fields[1:]):
        return None
    done, samples, index, passes = (int(f) for f in fields[1:])
    if not (0 <= done <= samples and samples > 0 and 1 <= index <= passes):
        return None
    return done, samples, index, passes

