"""User-facing errors: one clear line, no traceback, a non-zero exit."""
from __future__ import annotations

import sys

# Third-party packages only some sources need, and the pip requirement (an extra) that brings each one.
EXTRAS = {"torch": "kiln[torch]", "tflite_micro": "kiln[tflite]"}


class KilnError(Exception):
    """An error in the user's input (model, config, file); the CLI prints it as one line."""


def node_context(index: int, name: str, op: str, source: str = "") -> str:
    """How every message names an operator: index, name, type and, when known, the user's source."""
    where = f" at {source}" if source else ""
    return f"node {index} {name!r} ({op}){where}"


def missing_package(exc: ModuleNotFoundError) -> str:
    """The one-line error for a third-party package this Python lacks: which one, and which Python to install into."""
    top = (exc.name or "").split(".")[0]
    requirement = EXTRAS.get(top, "kiln")
    return (f"{sys.executable} has no Python package {top!r}, which Kiln needs here: install it into that Python "
            f"({sys.executable} -m pip install '{requirement}'), or set KILN_PYTHON to a Python that has it")
