"""User-facing errors: one clear line, no traceback, a non-zero exit."""
from __future__ import annotations


class KilnError(Exception):
    """An error in the user's input (model, config, file); the CLI prints it as one line."""


def node_context(index: int, name: str, op: str, source: str = "") -> str:
    """How every message names an operator: index, name, type and, when known, the user's source."""
    where = f" at {source}" if source else ""
    return f"node {index} {name!r} ({op}){where}"
