"""Entries of the shared build cache: content bound to its key, checked on every read.

SCons's CacheDir names an entry by the target's build signature and trusts
whatever file sits there. A Kiln entry starts with a header that binds the
content to that key, as Bazel's action cache binds an action to the digests
of its outputs in the content-addressed store: the key, the content's
SHA-256, the file mode, and, for a cache shared with less-trusted writers,
an HMAC of those under a secret they do not have. `parse_entry` accepts an
entry only when all of them hold; `read_regular` never follows a symlink or
opens anything but a regular file. (The SCons side is `VerifiedCacheDir` in
`site_scons/site_tools/kiln_scons.py`; docs/build.md has the trust model.)
"""
from __future__ import annotations

import hashlib
import hmac
import os
import stat
from dataclasses import dataclass

ENTRY_MAGIC = b"kiln-cache 2\n"
HMAC_KEY_ENV = "KILN_CACHE_HMAC_KEY"


@dataclass(frozen=True)
class Entry:
    data: bytes
    mode: int  # the permission bits of the file the entry was made from


def entry_bytes(key: str, data: bytes, mode: int, secret: bytes | None) -> bytes:
    """An entry: a header binding the content to its key (the target's build signature), then the content.

    The header holds the key, the content's SHA-256 and its mode, and, for a
    cache shared with less-trusted writers, an HMAC of those under a secret
    they do not have.
    """
    fields = f"key {key}\nsha256 {hashlib.sha256(data).hexdigest()}\nmode {mode & 0o777:o}\n".encode()
    mac = hmac.new(secret, fields, "sha256").hexdigest().encode() if secret else b"-"
    return ENTRY_MAGIC + fields + b"hmac " + mac + b"\n\n" + data


def parse_entry(raw: bytes, key: str, secret: bytes | None) -> Entry | str:
    """The entry in `raw` if it is bound to `key` and intact (and signed with `secret`, when given), else why not."""
    if not raw.startswith(ENTRY_MAGIC):
        return "no Kiln entry header"
    head, sep, data = raw[len(ENTRY_MAGIC):].partition(b"\n\n")
    lines = head.split(b"\n")
    names = [line.partition(b" ")[0] for line in lines]
    if not sep or names != [b"key", b"sha256", b"mode", b"hmac"]:
        return "malformed entry header"
    values = [line.partition(b" ")[2].decode("ascii", "replace") for line in lines]
    if values[0] != key:
        return "it is bound to another key"
    if values[1] != hashlib.sha256(data).hexdigest():
        return "content hash mismatch"
    if secret is not None:
        fields = b"".join(line + b"\n" for line in lines[:3])
        if not hmac.compare_digest(values[3], hmac.new(secret, fields, "sha256").hexdigest()):
            return f"its HMAC does not match ${HMAC_KEY_ENV}"
    try:
        mode = int(values[2], 8)
    except ValueError:
        return "malformed entry header"
    return Entry(data, mode & 0o777)


def read_regular(path: str) -> bytes | str | None:
    """The bytes of regular file `path` (None when absent; the reason when it is a symlink or no regular file).
    The last component is never followed, and opening never blocks (a FIFO)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return "a symlink" if os.path.islink(path) else f"unreadable ({exc.strerror})"
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return "not a regular file"
        return f.read()
