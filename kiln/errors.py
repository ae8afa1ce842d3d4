"""User-facing errors: one clear line, no traceback, a non-zero exit."""
from __future__ import annotations

import os
import sys
from typing import Callable

# Third-party packages only some sources need, and the pip requirement (an extra) that brings each one.
EXTRAS = {"torch": "kiln-mcu[torch]", "tflite_micro": "kiln-mcu[tflite]"}


class KilnError(Exception):
    """An error in the user's input (model, config, file); the CLI prints it as one line."""


def node_context(index: int, name: str, op: str, source: str = "", layer: str = "") -> str:
    """How every message names an operator: index, name, type and, when known, its layer's name in the source
    model and the user's source text."""
    named = f" in layer {layer!r}" if layer and layer != name else ""
    where = f" at {source}" if source else ""
    return f"node {index} {name!r} ({op}){named}{where}"


def missing_package(exc: ModuleNotFoundError) -> str:
    """The one-line error for a third-party package this Python lacks: which one, and which Python to install into."""
    top = (exc.name or "").split(".")[0]
    requirement = EXTRAS.get(top, "kiln-mcu")
    return (f"{sys.executable} has no Python package {top!r}, which Kiln needs here: install it into that Python "
            f"({sys.executable} -m pip install '{requirement}'), or set KILN_PYTHON to a Python that has it")


def one_line_errors(command: Callable[[], int | None]) -> int:
    """Run a command as a process's main: a user error (or a package this Python lacks) is one `kiln: error:` line
    and status 1, Ctrl-C status 130, and a reader that left the pipe (`kiln inspect ... | head`) ends it quietly."""
    try:
        return command() or 0
    except KilnError as exc:
        print(f"kiln: error: {exc}", file=sys.stderr)
    except ModuleNotFoundError as exc:
        print(f"kiln: error: {missing_package(exc)}", file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 1
