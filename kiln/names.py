"""Names from a model file on their way into C: identifiers and comment text that cannot escape."""
from __future__ import annotations

import re

_SAFE = re.compile(r"[^A-Za-z0-9_.:,;()\[\]<>=+\-/@ ]")  # no '*', so a '/' can neither open nor close a comment


def c_identifier(name: str) -> str:
    """A valid C identifier derived from `name` (letters, digits, underscores; never starting with a digit)."""
    ident = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return ident if ident and not ident[0].isdigit() else f"m_{ident}"


def c_text(text: str, limit: int = 80) -> str:
    """Text safe inside a C comment or string literal: no '*', '//', quotes, backslashes, '?', newlines or non-ASCII."""
    return _SAFE.sub("_", text).replace("//", "/_")[:limit]
