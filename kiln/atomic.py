"""Writing a file so that no reader ever sees half of it. Standard library only (the SCons tool writes with it)."""
from __future__ import annotations

import os
import secrets
from collections.abc import Iterable
from pathlib import Path


def write_atomic(path: str | os.PathLike, data: bytes | Iterable[bytes]) -> None:
    """Write `data` (bytes, or chunks written as they come) via a temp file in the same folder and rename, so
    readers never see half a file, also when making the chunks fails.

    The file is created with mode 0666 less the umask, as a compiler's
    outputs are (`mkstemp` would make every artifact private to its owner).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in [data] if isinstance(data, (bytes, bytearray, memoryview)) else data:
                f.write(chunk)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
