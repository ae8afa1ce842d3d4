"""The command lines README.md and docs/*.md show, taken from the files, and the registry of runners that run them.

What counts as a command line (`commands`):

- Only fenced code blocks hold commands. In a ```sh block every line is a command, except blank lines and
  lines that hold only a comment. In a plain ``` block only the lines that start with `$ ` are commands; its
  other lines are output samples (or a listing) and never run. Blocks of another language (python, toml,
  yaml, ini, nginx) are file contents, not commands.
- A line ending in a backslash continues on the next line. A trailing `# comment` is dropped; a block line
  that holds only a comment continues the comment of the line above.
- A plain-block line without `$ ` that reads like a command (`kiln compile ...`, `scons -j2`, `python ...`,
  `./scripts/...`) is an error (`unmarked`): mark it with `$ ` or move it to a ```sh block, so that no
  command hides among the output samples.
- The same command shown in several places is one command, run once; it lists every place (`where`).

What a runner replaces, and how (`Command.shell`):

- `[...]` after a space is an optional part (a requirement's `kiln-mcu[torch]` is not). A runner runs the command with the optional parts it names, each as written
  or with its value replaced by a smaller one (a bench script's `--models`, `--chains`: the documented value
  is the full run's), and without the others; naming an optional part the command lacks is an error.
- Upper-case words (`DIR`, `FILE`, `MODEL...`), `...` and URLs on example hosts (`cache.example.com`,
  `cache:8080`) are placeholders: a runner substitutes each by an exact replacement it names, which must occur
  in the command.
- A file the command reads that the docs do not show how to make (`net.onnx`, `calib.npy`, `x.npy`,
  `samples.bin`, `path/to/kws.onnx`) is made by the runner, under that name, from the zoo or a build, before
  the command runs; `out/` is what `kiln compile` writes.

A runner is a function registered with `@runs(pattern, ...)` in one of tests/doc_runners_*.py: it gets the
documented commands its patterns match (whole-command regular expressions), in the order the docs show them,
runs them with bash (`Docs.run`, in a fresh project) and asserts their exit status and a meaningful part of
their output. Every documented command must match exactly one runner, and every runner some command
(tests/test_docs.py): a new command in the docs fails the tests until a runner comes with it.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from conftest import ROOT
from scons_matrix import clone_snapshot, fresh_clone, parse_actions, shared_snapshot
from kiln.stages import STAGES

STAGE_NAMES = [s.name for s in STAGES]

COMMAND_BLOCKS = ("sh", "bash", "shell")
# A plain-block line without `$ ` that starts like a command (output lines such as `kiln: error: ...`,
# `kiln fault: ...` or `scons: rebuilding ...` have a colon in their first two words).
LOOKS_LIKE_COMMAND = re.compile(r"(kiln|scons|python3?|pip|timeout|cd|\.venv/bin/\S+|\./\S+|\S+\.sh)( (?!\S*:)|$)")
OPTIONAL = re.compile(r" \[([^\[\]]+)\]")  # a word in brackets: `[--raw]`, not `kiln-mcu[torch]`


@dataclass(frozen=True)
class Command:
    """One documented command line: as shown, without prompt, continuations and comment; every place it is shown."""

    text: str
    where: tuple[str, ...]

    def shell(self, keep: dict[str, str | bool] | None = None, replace: dict[str, str] | None = None) -> str:
        """The command to run: optional parts named in `keep` (by their first word) kept as written (True) or with
        their value replaced (a string; a part of one word is replaced whole), the other optional parts dropped,
        then each `replace` placeholder substituted."""
        keep, replace = dict(keep or {}), replace or {}

        def optional(match: re.Match) -> str:
            words = match[1].split(" ", 1)
            choice = keep.pop(words[0], None)
            if choice is None or choice is False:
                return ""
            if choice is True:
                return " " + match[1]
            return " " + (f"{words[0]} {choice}" if len(words) > 1 else choice)

        text = OPTIONAL.sub(optional, self.text)
        assert not keep, f"{self.text!r} has no optional part {sorted(keep)}"
        for placeholder, value in replace.items():
            assert placeholder in text, f"{self.text!r} shows no {placeholder!r}"
            text = text.replace(placeholder, value)
        return text


@dataclass(frozen=True)
class Runner:
    name: str
    patterns: tuple[re.Pattern, ...]
    run: Callable

    def matches(self, command: Command) -> bool:
        return any(p.fullmatch(command.text) for p in self.patterns)


RUNNERS: dict[str, Runner] = {}


def runs(*patterns: str) -> Callable[[Callable], Callable]:
    """Register the decorated function as the runner of the documented commands that match one of `patterns`."""

    def register(fn: Callable) -> Callable:
        assert fn.__name__ not in RUNNERS, fn.__name__
        RUNNERS[fn.__name__] = Runner(fn.__name__, tuple(re.compile(p) for p in patterns), fn)
        return fn

    return register


def doc_files(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def blocks(text: str) -> list[tuple[str, int, list[str]]]:
    """Each fenced code block of a Markdown text: (its language, the line number of its first line, its lines)."""
    out, current = [], None
    for number, line in enumerate(text.splitlines(), 1):
        fence = re.match(r"\s*```(\S*)", line)
        if fence and current is None:
            current = (fence[1], number + 1, [])
        elif fence:
            out.append(current)
            current = None
        elif current is not None:
            current[2].append(line)
    return out


def _strip_comment(line: str) -> str:
    """`line` without a trailing `# comment` (a `#` that starts a word outside quotes)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line.rstrip()


def block_commands(language: str, lines: list[str]) -> list[tuple[int, str]]:
    """The commands of one code block, each with its line offset in the block."""
    if language not in COMMAND_BLOCKS and language != "":
        return []
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for offset, raw in enumerate(lines):
        if pending is not None:  # a continuation line
            line = _strip_comment(raw.strip())
        elif language == "" and not raw.startswith("$ "):
            continue
        else:
            line = _strip_comment(raw[2:] if language == "" else raw)
            if not line.strip():
                continue
            pending = (offset, "")
        text = " ".join(filter(None, (pending[1], line.strip().removesuffix("\\").strip())))
        if line.endswith("\\"):
            pending = (pending[0], text)
        else:
            out.append((pending[0], text))
            pending = None
    assert pending is None, f"a continuation with no next line: {pending}"
    return out


def unmarked(language: str, lines: list[str]) -> list[tuple[int, str]]:
    """Lines of a plain block that read like commands but have no `$ ` prompt."""
    if language != "":
        return []
    return [(offset, line) for offset, line in enumerate(lines) if LOOKS_LIKE_COMMAND.match(line)]


def commands(root: Path = ROOT) -> list[Command]:
    """Every documented command, once, in the order the docs first show it (README.md, then docs/*.md)."""
    places: dict[str, list[str]] = {}
    for path in doc_files(root):
        for language, first, lines in blocks(path.read_text()):
            for offset, text in block_commands(language, lines):
                places.setdefault(text, []).append(f"{path.relative_to(root)}:{first + offset}")
    return [Command(text, tuple(where)) for text, where in places.items()]


def unmarked_lines(root: Path = ROOT) -> list[str]:
    return [f"{path.relative_to(root)}:{first + offset}: {line}" for path in doc_files(root)
            for language, first, lines in blocks(path.read_text()) for offset, line in unmarked(language, lines)]


# -- what runners share -----------------------------------------------------------------------------

@dataclass
class Result:
    stdout: str
    stderr: str

    @property
    def log(self) -> str:
        return self.stdout + self.stderr

    @property
    def actions(self) -> set[str]:
        return parse_actions(self.log)[0]


class Docs:
    """What runners share. A fresh project is a clone of the snapshot (tests/scons_matrix.py: tiny_cnn and onnx_cnn,
    built for the host once per session) with `.venv` (and `.venv-tf`) linking to the test environment; commands
    that need no project run in an empty folder. `kiln`, `scons` and `python` are the test environment's."""

    def __init__(self, tmp_path: Path, request: pytest.FixtureRequest) -> None:
        self.tmp, self.request = tmp_path, request

    def fixture(self, name: str):
        """A fixture (pytest's or conftest.py's), set up when a runner first asks for it."""
        return self.request.getfixturevalue(name)

    def project(self, name: str = "project") -> Path:
        """A clone of the built snapshot: SCons sees it up to date."""
        return self._link_environment(clone_snapshot(shared_snapshot(self.fixture("tmp_path_factory")), self.tmp / name))

    def sources(self, name: str = "sources") -> Path:
        """The snapshot's sources only, as a fresh clone has them: nothing built."""
        return self._link_environment(fresh_clone(shared_snapshot(self.fixture("tmp_path_factory")), self.tmp / name))

    def folder(self, name: str) -> Path:
        path = self.tmp / name
        path.mkdir()
        return path

    def out(self, cwd: Path, model: str) -> None:
        """`out/`: what `kiln compile models/<model> -o out/` writes, from the session's compiled models."""
        shutil.copytree(self.fixture("compiled")(model), cwd / "out", ignore=shutil.ignore_patterns(".lock", ".done"))

    @staticmethod
    def _link_environment(repo: Path) -> Path:
        (repo / ".venv").symlink_to(sys.prefix)
        (repo / ".venv-tf").symlink_to((ROOT / ".venv-tf").resolve())
        return repo

    @staticmethod
    def run(text: str, cwd: Path, env: dict[str, str] | None = None) -> Result:
        """Run `text` with bash in `cwd`; asserts it succeeds."""
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
        proc = subprocess.run(["bash", "-c", text], cwd=cwd, env={**os.environ, "PATH": path, **(env or {})},
                              capture_output=True, text=True, timeout=900)
        result = Result(proc.stdout, proc.stderr)
        assert proc.returncode == 0, f"$ {text}\n(exit {proc.returncode})\n{result.log[-6000:]}"
        return result


def model_stages(model: str, names: list[str] = STAGE_NAMES) -> set[str]:
    return {f"kiln {name} {model}" for name in names}


def stage_actions(actions: set[str]) -> set[str]:
    return {a for a in actions if a.startswith("kiln ")}
