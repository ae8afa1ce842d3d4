"""The shared build cache on an HTTP server, in the protocol of Bazel's remote caches.

A CI fleet already runs such a server (bazel-remote, nginx with WebDAV,
Artifactory); Kiln uses it as Bazel does: `GET`/`PUT /ac/<key>` holds an
action result (a REAPI `ActionResult` protobuf, so servers that validate
them accept it) naming the digest of one blob, and `GET`/`PUT
/cas/<sha256>` holds that blob. The blob is exactly a local cache entry
(`buildcache.entry_bytes`): the content with a header binding it to the key,
its SHA-256 and mode, and an HMAC under `KILN_CACHE_HMAC_KEY` when set.

Nothing the server says is trusted: the blob must hash to the digest, be of
its size and bind itself to the key being looked up; bodies are bounded,
redirects are not followed, and anything else is a miss, reported, never a
wrong build. A server that fails (refuses, times out, answers with an error
after a few retries, keeps answering late) is dropped for the rest of the
build with one message, so a down or slow server costs at most a few seconds. Standard library only:
the SCons process imports this module (docs/build.md, "A cache server").
"""
from __future__ import annotations

import base64
import hashlib
import http.client
import os
import re
import socket
import sys
import threading
import time
import urllib.parse
from typing import Callable

from .buildcache import Entry, entry_bytes, parse_entry
from .errors import KilnError

TOKEN_ENV = "KILN_CACHE_TOKEN"  # sent as `Authorization: Bearer <token>`
USER_ENV, PASSWORD_ENV = "KILN_CACHE_USER", "KILN_CACHE_PASSWORD"  # sent as basic auth
TIMEOUT_ENV = "KILN_CACHE_TIMEOUT"  # seconds a request may go without progress (default 2)
DEFAULT_TIMEOUT = 2.0
MAX_ENTRY_BYTES = 256 << 20  # larger entries are neither fetched nor stored
MIN_RATE = 1 << 20  # bytes per second: a transfer slower than this fails, so a trickling server cannot stall a build
MAX_ACTION_RESULT = 64 << 10
RETRIES = 2  # after a refused or reset connection or a 5xx/429 answer; a timeout is never retried
SLOW_ANSWERS = 3  # answers that start after half the timeout: this many drop the server (each still counts)
BACKOFF = 0.1  # seconds before the first retry, doubled for the next
ENTRY_PATH = "kiln-entry"  # the one output file an action result names
_TRANSIENT = (429, 500, 502, 503, 504)
_KEY = re.compile(r"[0-9a-f]{64}")
_URL_PATH = re.compile(r"[A-Za-z0-9._~!$&'()*+,;=:@%/-]*")


def is_url(location: str) -> bool:
    """Whether a `--kiln-cache` value names a server (`scheme://...`) rather than a folder."""
    return re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", location) is not None


class _Failed(Exception):
    """A request that did not get an answer; `retry` when trying again may help."""

    def __init__(self, reason: str, retry: bool) -> None:
        super().__init__(reason)
        self.retry = retry


class RemoteCache:
    """A client of one cache server, shared by every thread of a build.

    `get` returns the verified entry for a key, None on a miss, or the reason
    a stored entry was refused; `put` stores one. After the first failure
    (`down`) neither talks to the server again.
    """

    def __init__(self, url: str, secret: bytes | None, readonly: bool, environ: dict[str, str] | None = None,
                 report: Callable[[str], None] | None = None) -> None:
        environ = os.environ if environ is None else environ
        parts = urllib.parse.urlsplit(url)
        if "@" in parts.netloc:  # checked first: no message may show a password
            raise KilnError(f"--kiln-cache: no credentials in the URL; set {TOKEN_ENV}, or {USER_ENV} and {PASSWORD_ENV}")
        if parts.scheme not in ("http", "https"):
            raise KilnError(f"--kiln-cache={url}: a cache server URL starts with http:// or https://")
        try:
            port = parts.port
        except ValueError:
            raise KilnError(f"--kiln-cache={url}: invalid port") from None
        if not parts.hostname or parts.query or parts.fragment or not _URL_PATH.fullmatch(parts.path):
            raise KilnError(f"--kiln-cache={url}: expected http(s)://HOST[:PORT][/PATH] without query or fragment")
        self.url = url
        self.scheme, self.host, self.port = parts.scheme, parts.hostname, port
        self.prefix = parts.path.rstrip("/")
        self.secret, self.readonly = secret, readonly
        self.timeout = _timeout(environ)
        self.headers = {"User-Agent": "kiln", **_auth_header(environ)}
        self.report = report or (lambda message: print(f"kiln: {message}", file=sys.stderr))
        self.down: str | None = None  # why the server is no longer used in this build
        self.writes_refused: str | None = None  # why nothing more is stored (the server refuses PUTs)
        self.slow_answers = 0
        self._lock = threading.Lock()
        self._local = threading.local()  # one keep-alive connection per thread

    # -- what the build calls ------------------------------------------------------------------
    def put(self, key: str, data: bytes, mode: int) -> bool:
        """Store `data` under `key` (the blob first, then the action result naming it); whether the server took it."""
        if self.readonly or self.down or self.writes_refused or not _KEY.fullmatch(key):
            return False
        blob = entry_bytes(key, data, mode, self.secret)
        if len(blob) > MAX_ENTRY_BYTES:
            return False
        digest = hashlib.sha256(blob).hexdigest()
        for path, body in ((f"/cas/{digest}", blob), (f"/ac/{key}", action_result(digest, len(blob)))):
            status = self._call("PUT", path, body)
            if status is None:
                return False
            if status[0] not in (200, 201, 204):
                with self._lock:
                    if not self.writes_refused:
                        self.writes_refused = _printable(f"{status[0]} {status[1]}")
                        self.report(f"cache server {self.url} refused to store an entry ({self.writes_refused}); "
                                    "not writing to it for the rest of this build")
                return False
        return True

    def get(self, key: str) -> Entry | str | None:
        """The entry stored under `key` if the server has one bound to it and intact; None on a miss; else why not."""
        if self.down or not _KEY.fullmatch(key):
            return None
        answer = self._call("GET", f"/ac/{key}", limit=MAX_ACTION_RESULT)
        if answer is None or answer[0] == 404:
            return None
        if isinstance(answer[2], str):
            return f"its action result is {answer[2]}"
        digest = blob_digest(answer[2])
        if isinstance(digest, str):
            return digest
        blob_hash, size = digest
        if size > MAX_ENTRY_BYTES:
            return f"it names a blob of {size} bytes, over the {MAX_ENTRY_BYTES >> 20} MiB limit"
        answer = self._call("GET", f"/cas/{blob_hash}", limit=size)
        if answer is None or answer[0] == 404:
            return None  # evicted from the CAS: an ordinary miss
        blob = answer[2]
        if isinstance(blob, str):
            return f"its blob is {blob}"
        if len(blob) != size or hashlib.sha256(blob).hexdigest() != blob_hash:
            return "its blob does not match the digest it was stored under"
        return parse_entry(blob, key, self.secret)

    # -- the protocol --------------------------------------------------------------------------
    def _call(self, method: str, path: str, body: bytes | None = None, limit: int = 0):
        """(status, reason, body or why the body was refused), or None once the server is down.

        Transient failures (refused or reset connections, 5xx/429 answers) are
        retried a few times. A GET answered with anything but 200 or 404, a
        timeout or the last failed retry takes the server out of this build;
        a PUT's other answers go back to `put`.
        """
        attempt = 0
        while not self.down:
            try:
                status, reason, data, waited = self._request(method, self.prefix + path, body, limit)
            except _Failed as failed:
                if not failed.retry or attempt == RETRIES:
                    self._give_up(str(failed))
                    return None
            else:
                if waited > self.timeout / 2:  # a server that always answers just in time would cost a build minutes
                    with self._lock:
                        self.slow_answers += 1
                    if self.slow_answers >= SLOW_ANSWERS:
                        self._give_up(f"{self.slow_answers} answers took over {self.timeout / 2:g} s to start")
                transient = status in _TRANSIENT
                if not transient and (status in (200, 404) or method == "PUT"):
                    return status, reason, data
                if not transient or attempt == RETRIES:
                    self._give_up(f"it answered {method} /{path.split('/')[1]}/... with {status} {reason}")
                    return None
            time.sleep(BACKOFF * 2 ** attempt)
            attempt += 1
        return None

    def _request(self, method: str, path: str, body: bytes | None, limit: int) -> tuple[int, str, bytes | str | None, float]:
        """One request on this thread's connection, within a deadline that a trickling server cannot stretch:
        (status, reason, body or why it was refused, seconds until the answer started)."""
        conn = self._connection()
        size = len(body) if body else limit
        deadline = self.timeout * 2 + size / MIN_RATE
        cut = threading.Event()
        watchdog = threading.Timer(deadline, _cut, (conn, cut))
        watchdog.daemon = True
        start = time.monotonic()
        try:
            if conn.sock is None:
                conn.connect()
            conn.sock.settimeout(self.timeout + size / MIN_RATE if body else self.timeout)  # sendall's limit is total
            watchdog.start()
            headers = dict(self.headers)
            if body is not None:
                headers["Content-Type"] = "application/octet-stream"
            conn.request(method, path, body=body, headers=headers)
            sent = time.monotonic()
            response = conn.getresponse()
            waited = time.monotonic() - sent
            data = _read(response, limit) if method == "GET" and response.status == 200 else response.read(MAX_ACTION_RESULT)
            if isinstance(data, str) or not response.will_close and response.read(1):
                conn.close()  # a body left unread (or longer than announced) must not be taken for the next answer
        except (OSError, http.client.HTTPException, ValueError) as exc:
            conn.close()
            if cut.is_set():
                raise _Failed(f"no whole answer within {deadline:.1f} s", retry=False) from None
            if isinstance(exc, TimeoutError) or time.monotonic() - start >= self.timeout:
                raise _Failed(f"no answer within {self.timeout:g} s", retry=False) from None
            raise _Failed(_describe(exc), retry=True) from None
        finally:
            watchdog.cancel()
        if cut.is_set():  # what arrived before the cut is not the answer
            conn.close()
            raise _Failed(f"no whole answer within {deadline:.1f} s", retry=False)
        return response.status, response.reason, data if method == "GET" else None, waited

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self.scheme == "https":
                import ssl  # only for https: a plain-http build loads no TLS

                conn = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout,
                                                   context=ssl.create_default_context())
            else:
                conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            self._local.conn = conn
        return conn

    def _give_up(self, reason: str) -> None:
        with self._lock:
            if self.down:
                return
            self.down = _printable(reason)
        self.report(f"cache server {self.url} failed ({self.down}); building without it for the rest of this build")


def _read(response: http.client.HTTPResponse, limit: int) -> bytes | str:
    """The body of a 200 answer if it holds at most `limit` bytes, else why not (the rest is never read)."""
    length = response.getheader("Content-Length")
    if length is not None and (not re.fullmatch(r"[0-9]+", length.strip()) or int(length) > limit):
        return f"announced as {_printable(length.strip())} bytes, over the {limit} expected"
    data = response.read(limit + 1)
    return data if len(data) <= limit else f"longer than the {limit} bytes expected"


def _cut(conn: http.client.HTTPConnection, cut: threading.Event) -> None:
    """Cut a request that overran its deadline: its blocked read returns at once."""
    cut.set()
    sock = conn.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _printable(text: str, limit: int = 120) -> str:
    """Server-chosen text (a reason phrase, a bad status line) as it may reach a terminal: printable ASCII, short."""
    return "".join(c if " " <= c <= "~" else "?" for c in text[:limit])


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, socket.gaierror):
        return "unknown host"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _timeout(environ: dict[str, str]) -> float:
    raw = environ.get(TIMEOUT_ENV, "")
    try:
        value = float(raw) if raw else DEFAULT_TIMEOUT
    except ValueError:
        value = -1.0
    if not 0 < value <= 600:
        raise KilnError(f"{TIMEOUT_ENV}={raw!r}: expected a number of seconds between 0 and 600")
    return value


def _auth_header(environ: dict[str, str]) -> dict[str, str]:
    """`Authorization` from `KILN_CACHE_TOKEN` (bearer) or `KILN_CACHE_USER` and `KILN_CACHE_PASSWORD` (basic)."""
    token, user, password = (environ.get(name, "") for name in (TOKEN_ENV, USER_ENV, PASSWORD_ENV))
    if token and (user or password):
        raise KilnError(f"set either {TOKEN_ENV} or {USER_ENV} and {PASSWORD_ENV} for the cache server, not both")
    if bool(user) != bool(password):
        raise KilnError(f"{USER_ENV} and {PASSWORD_ENV} go together: set both for basic auth")
    if token:
        value = f"Bearer {token}"
    elif user:
        if ":" in user:
            raise KilnError(f"{USER_ENV} cannot hold ':' (basic auth separates user and password with it)")
        value = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    else:
        return {}
    if any(not 0x20 <= ord(c) < 0x7F for c in value):
        raise KilnError("the cache server credentials hold a control or non-ASCII character")
    return {"Authorization": value}


# -- the REAPI ActionResult, as much of it as Kiln writes and reads --------------------------------
def action_result(blob_hash: str, size: int) -> bytes:
    """`ActionResult{output_files: [OutputFile{path: "kiln-entry", digest: Digest{hash, size_bytes}}]}`."""
    digest = _field(1, blob_hash.encode()) + _varint_field(2, size)
    return _field(2, _field(1, ENTRY_PATH.encode()) + _field(2, digest))


def blob_digest(raw: bytes) -> tuple[str, int] | str:
    """(hash, size) of the blob an action result names, or why it is not one Kiln wrote."""
    try:
        files = [value for number, value in _fields(raw) if number == 2]
        if len(files) != 1 or not isinstance(files[0], bytes):
            return "not an action result with one output file"
        digests = [value for number, value in _fields(files[0]) if number == 2]
        if len(digests) != 1 or not isinstance(digests[0], bytes):
            return "not an action result with one output file"
        fields = dict(_fields(digests[0]))
    except ValueError:
        return "not a valid action result"
    blob_hash, size = fields.get(1, b""), fields.get(2, 0)
    if not isinstance(blob_hash, bytes) or not _KEY.fullmatch(blob_hash.decode("ascii", "replace")) or not isinstance(size, int):
        return "not an action result naming a SHA-256 digest"
    return blob_hash.decode("ascii"), size


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        out.append(value & 0x7F | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _varint_field(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _fields(raw: bytes) -> list[tuple[int, int | bytes]]:
    """The (field number, value) pairs of one protobuf message: varints as ints, length-delimited fields as bytes."""
    fields, at = [], 0
    while at < len(raw):
        key, at = _read_varint(raw, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _read_varint(raw, at)
        elif wire == 2:
            length, at = _read_varint(raw, at)
            if at + length > len(raw):
                raise ValueError("truncated field")
            value, at = raw[at:at + length], at + length
        elif wire in (1, 5):
            at += 8 if wire == 1 else 4
            if at > len(raw):
                raise ValueError("truncated field")
            continue
        else:
            raise ValueError(f"wire type {wire}")
        fields.append((number, value))
    return fields


def _read_varint(raw: bytes, at: int) -> tuple[int, int]:
    value = 0
    for shift in range(0, 64, 7):
        if at >= len(raw):
            raise ValueError("truncated varint")
        byte = raw[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
    raise ValueError("varint too long")
