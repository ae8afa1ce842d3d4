"""kiln/remotecache.py: the client of a Bazel HTTP remote cache, against a real nginx (WebDAV PUT) and against
servers that lie, stall, trickle, redirect or fail. Whatever a server does, a lookup returns the stored entry or
a miss (with the reason when a stored entry is refused), never raises, and a failing server costs one timeout."""
from __future__ import annotations

import base64
import hashlib
import time
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from cache_servers import closed_port_url, nginx, scripted_server, silent_server
from kiln import remotecache
from kiln.buildcache import Entry, entry_bytes
from kiln.errors import KilnError

KEY = hashlib.sha256(b"a target's build signature").hexdigest()
OTHER_KEY = hashlib.sha256(b"another target's build signature").hexdigest()
DATA = b"\x00kiln artifact bytes\xff" * 100
MODE = 0o755
SECRET = b"a secret only trusted writers have"


def client(url: str, secret: bytes | None = None, readonly: bool = False, reports: list | None = None, **environ: str):
    return remotecache.RemoteCache(url, secret, readonly, environ=environ,
                                   report=(reports.append if reports is not None else lambda message: None))


def reapi_action_result():
    """The REAPI messages Kiln writes (Digest, OutputFile, ActionResult), built with protobuf itself: the oracle
    for what a validating server (bazel-remote) parses."""
    proto = descriptor_pb2.FileDescriptorProto(name="reapi_subset.proto", package="build.bazel.remote.execution.v2",
                                               syntax="proto3")
    T = descriptor_pb2.FieldDescriptorProto
    for name, fields in (("Digest", [("hash", 1, T.TYPE_STRING, None), ("size_bytes", 2, T.TYPE_INT64, None)]),
                         ("OutputFile", [("path", 1, T.TYPE_STRING, None), ("digest", 2, T.TYPE_MESSAGE, "Digest"),
                                         ("is_executable", 4, T.TYPE_BOOL, None)]),
                         ("ExecutedActionMetadata", [("worker", 1, T.TYPE_STRING, None)]),
                         ("ActionResult", [("output_files", 2, T.TYPE_MESSAGE, "OutputFile"), ("exit_code", 4, T.TYPE_INT32, None),
                                           ("execution_metadata", 9, T.TYPE_MESSAGE, "ExecutedActionMetadata")])):
        message = proto.message_type.add(name=name)
        for field, number, kind, type_name in fields:
            label = T.LABEL_REPEATED if field == "output_files" else T.LABEL_OPTIONAL
            message.field.add(name=field, number=number, type=kind, label=label,
                              type_name=f".build.bazel.remote.execution.v2.{type_name}" if type_name else None)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("build.bazel.remote.execution.v2.ActionResult"))


def stored_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# -- against nginx -----------------------------------------------------------------------------
def test_put_then_get_through_nginx_stores_an_action_result_and_its_blob(tmp_path):
    with nginx(tmp_path / "nginx") as url:
        cache = client(url, SECRET)
        assert cache.get(KEY) is None  # a miss: nothing stored yet
        assert cache.put(KEY, DATA, MODE)
        files = stored_files(tmp_path / "nginx" / "root")
        blob = entry_bytes(KEY, DATA, MODE, SECRET)
        digest = hashlib.sha256(blob).hexdigest()
        assert sorted(files) == [f"ac/{KEY}", f"cas/{digest}"] and files[f"cas/{digest}"] == blob
        result = reapi_action_result().FromString(files[f"ac/{KEY}"])
        assert [(f.path, f.digest.hash, f.digest.size_bytes) for f in result.output_files] == [("kiln-entry", digest, len(blob))]
        assert client(url, SECRET).get(KEY) == Entry(DATA, MODE)  # a new client: nothing remembered
        assert client(url, SECRET).get(OTHER_KEY) is None and cache.down is None


def test_a_blob_bound_to_another_key_or_unsigned_is_refused(tmp_path):
    with nginx(tmp_path / "nginx") as url:
        client(url).put(OTHER_KEY, DATA, MODE)
        root = tmp_path / "nginx" / "root"
        (root / "ac" / KEY).write_bytes((root / "ac" / OTHER_KEY).read_bytes())  # OTHER_KEY's result at KEY
        assert client(url).get(KEY) == "it is bound to another key"
        assert client(url, SECRET).get(OTHER_KEY) == "its HMAC does not match $KILN_CACHE_HMAC_KEY"
        assert client(url).get(OTHER_KEY) == Entry(DATA, MODE)


def test_a_tampered_blob_is_refused(tmp_path):
    with nginx(tmp_path / "nginx") as url:
        client(url).put(KEY, DATA, MODE)
        blob = next((tmp_path / "nginx" / "root" / "cas").iterdir())
        raw = bytearray(blob.read_bytes())
        raw[-5] ^= 1
        blob.write_bytes(bytes(raw))
        assert client(url).get(KEY) == "its blob does not match the digest it was stored under"


def test_readonly_never_writes(tmp_path):
    with nginx(tmp_path / "nginx") as url:
        assert not client(url, readonly=True).put(KEY, DATA, MODE)
        assert stored_files(tmp_path / "nginx" / "root") == {}
        assert (tmp_path / "nginx" / "access.log").read_text() == ""  # not even a request


@pytest.mark.parametrize("scheme", ["bearer", "basic"])
def test_credentials_from_the_environment_reach_a_server_that_requires_them(tmp_path, scheme):
    environ = {"KILN_CACHE_TOKEN": "t0ken"} if scheme == "bearer" else {"KILN_CACHE_USER": "ci", "KILN_CACHE_PASSWORD": "pw"}
    header = "Bearer t0ken" if scheme == "bearer" else "Basic " + base64.b64encode(b"ci:pw").decode()
    with nginx(tmp_path / "nginx", auth=header) as url:
        assert client(url, **environ).put(KEY, DATA, MODE)
        assert client(url, **environ).get(KEY) == Entry(DATA, MODE)
        reports: list[str] = []
        anonymous = client(url, reports=reports)
        assert anonymous.get(KEY) is None and "401" in anonymous.down and len(reports) == 1
        assert anonymous.get(KEY) is None and len(reports) == 1


def test_https_checks_the_server_certificate(tmp_path, monkeypatch):
    with nginx(tmp_path / "nginx", tls=True) as url:
        assert url.startswith("https://")
        monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "nginx" / "cert.pem"))  # trusted: OpenSSL's own variable
        assert client(url).put(KEY, DATA, MODE) and client(url).get(KEY) == Entry(DATA, MODE)
        monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "nowhere.pem"))  # not trusted: the system's CAs only
        untrusted = client(url)
        assert untrusted.get(KEY) is None and "CERTIFICATE_VERIFY_FAILED" in untrusted.down


@pytest.mark.parametrize("url, environ, message", [
    ("http://user:pw@127.0.0.1:1/", {}, "no credentials in the URL"),
    ("ftp://127.0.0.1/", {}, "starts with http:// or https://"),
    ("ftp://user:pw@127.0.0.1/", {}, "no credentials in the URL"),
    ("http://127.0.0.1:1/?q=1", {}, "without query or fragment"),
    ("http://127.0.0.1:99999/", {}, "invalid port"),
    ("http://127.0.0.1:1/", {"KILN_CACHE_TOKEN": "t", "KILN_CACHE_USER": "u"}, "not both"),
    ("http://127.0.0.1:1/", {"KILN_CACHE_USER": "u"}, "go together"),
    ("http://127.0.0.1:1/", {"KILN_CACHE_TOKEN": "t\r\nX-Injected: 1"}, "control or non-ASCII"),
    ("http://127.0.0.1:1/", {"KILN_CACHE_TIMEOUT": "soon"}, "KILN_CACHE_TIMEOUT"),
])
def test_bad_settings_are_one_line_errors(url, environ, message):
    with pytest.raises(KilnError, match=message) as caught:
        client(url, **environ)
    assert "\n" not in str(caught.value) and "pw" not in str(caught.value)


# -- servers that fail ---------------------------------------------------------------------------
def test_a_closed_port_is_given_up_at_once():
    reports: list[str] = []
    cache = client(closed_port_url(), reports=reports)
    start = time.monotonic()
    assert cache.get(KEY) is None and not cache.put(KEY, DATA, MODE) and cache.get(OTHER_KEY) is None
    assert time.monotonic() - start < 2  # three connection attempts with short back-off, then never again
    assert cache.down == "connection refused" and len(reports) == 1


def test_a_server_that_never_answers_costs_one_timeout():
    with silent_server() as (url, accepted):
        reports: list[str] = []
        cache = client(url, reports=reports, KILN_CACHE_TIMEOUT="0.5")
        start = time.monotonic()
        assert cache.get(KEY) is None
        assert time.monotonic() - start < 2.5
        assert not cache.put(KEY, DATA, MODE) and cache.get(OTHER_KEY) is None
        assert len(accepted) == 1 and cache.down == "no answer within 0.5 s" and len(reports) == 1


def trickle(handler) -> None:
    """Headers one byte at a time, each well within the socket timeout, forever."""
    for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 10**6:
        handler.wfile.write(bytes([byte]))
        handler.wfile.flush()
        time.sleep(0.05)


def test_a_trickling_server_cannot_stretch_a_request_past_its_deadline():
    with scripted_server(trickle) as (url, seen):
        cache = client(url, KILN_CACHE_TIMEOUT="0.3")
        start = time.monotonic()
        assert cache.get(KEY) is None
        assert time.monotonic() - start < 3 and cache.down and len(seen) == 1


def answer(status: int, body: bytes = b"", **headers: str):
    def respond(handler) -> None:
        handler.send_response(status)
        for name, value in {"Content-Length": str(len(body)), **headers}.items():
            handler.send_header(name.replace("_", "-"), value)
        handler.end_headers()
        handler.wfile.write(body)
    return respond


def test_a_redirect_is_never_followed(tmp_path):
    with nginx(tmp_path / "nginx") as good:
        client(good).put(KEY, DATA, MODE)
        with scripted_server(answer(307, Location=f"{good}/ac/{KEY}")) as (url, seen):
            cache = client(url, KILN_CACHE_TOKEN="t0ken")
            assert cache.get(KEY) is None and "307" in cache.down and len(seen) == 1
        assert "t0ken" not in (tmp_path / "nginx" / "access.log").read_text()
        assert (tmp_path / "nginx" / "access.log").read_text().count(f"/ac/{KEY}") == 1  # the put only


def test_server_errors_are_retried_a_bounded_number_of_times():
    with scripted_server(answer(503)) as (url, seen):
        cache = client(url)
        assert cache.get(KEY) is None and "503" in cache.down
        assert len(seen) == 1 + remotecache.RETRIES
        assert cache.get(OTHER_KEY) is None and len(seen) == 1 + remotecache.RETRIES


def test_a_failure_then_success_is_retried():
    blob = entry_bytes(KEY, DATA, MODE, None)
    digest = hashlib.sha256(blob).hexdigest()
    answers = [answer(502), answer(200, remotecache.action_result(digest, len(blob))), answer(200, blob)]
    with scripted_server(lambda handler: answers.pop(0)(handler)) as (url, seen):
        assert client(url).get(KEY) == Entry(DATA, MODE)
        assert [path for _, path, _ in seen] == [f"/ac/{KEY}", f"/ac/{KEY}", f"/cas/{digest}"]


def test_a_refused_put_stops_writes_but_not_reads():
    with scripted_server(answer(403)) as (url, seen):
        reports: list[str] = []
        cache = client(url, reports=reports)
        assert not cache.put(KEY, DATA, MODE) and not cache.put(OTHER_KEY, DATA, MODE)
        assert cache.writes_refused == "403 Forbidden" and len(reports) == 1 and len(seen) == 1
        assert cache.get(KEY) is None and cache.down and len(seen) == 2  # a GET answered 403 fails the server


def blob_for(key: str, data: bytes = DATA) -> bytes:
    return entry_bytes(key, data, MODE, None)


def lying_server(result: bytes, blob: bytes, **blob_headers: str):
    """/ac/ answers `result`, /cas/ answers `blob`."""
    return lambda handler: answer(200, result if "/ac/" in handler.path else blob, **(
        {} if "/ac/" in handler.path else blob_headers))(handler)


@pytest.mark.parametrize("case", ["wrong digest", "other key", "not protobuf", "no digest", "huge announced",
                                  "longer than announced", "huge blob named", "huge action result", "truncated"])
def test_lying_answers_are_refused_entries(case):
    good = blob_for(KEY)
    digest = hashlib.sha256(good).hexdigest()
    other = blob_for(OTHER_KEY)
    result, blob, headers = remotecache.action_result(digest, len(good)), good, {}
    if case == "wrong digest":
        blob = blob_for(KEY, b"another artifact of the same length" + DATA[35:])
    elif case == "other key":
        result, blob = remotecache.action_result(hashlib.sha256(other).hexdigest(), len(other)), other
    elif case == "not protobuf":
        result = b"<html>cache</html>"
    elif case == "no digest":
        result = remotecache._field(2, remotecache._field(1, b"kiln-entry"))
    elif case == "huge announced":
        headers = {"Content-Length": str(10**12)}
    elif case == "longer than announced":
        result, blob = remotecache.action_result(digest, len(good) - 1), good
    elif case == "huge blob named":
        result = remotecache.action_result(digest, remotecache.MAX_ENTRY_BYTES + 1)
    elif case == "huge action result":
        result = b"\x00" * (remotecache.MAX_ACTION_RESULT + 1)
    elif case == "truncated":
        result = remotecache.action_result(digest, len(good))[:-3]
    with scripted_server(lying_server(result, blob, **headers)) as (url, seen):
        cache = client(url)
        found = cache.get(KEY)
        assert isinstance(found, str), found
        assert cache.down is None  # a bad entry is a miss, the server stays in use
        if case in ("huge blob named", "huge action result", "not protobuf", "no digest", "truncated"):
            assert [path.split("/")[1] for _, path, _ in seen] == ["ac"]  # the blob is never fetched


def test_server_text_reaches_the_terminal_printable():
    def escape(handler) -> None:
        handler.wfile.write(b"HTTP/1.1 500 \x1b[2J\x1b]0;pwned\x07" + b"x" * 500 + b"\r\nContent-Length: 0\r\n\r\n")

    with scripted_server(escape) as (url, seen):
        reports: list[str] = []
        cache = client(url, reports=reports)
        assert cache.get(KEY) is None and len(reports) == 1
        assert "500 ?[2J?]0;pwned?x" in reports[0] and len(cache.down) <= 120
        assert all(" " <= c <= "~" for c in reports[0])


def test_garbage_instead_of_http_is_a_failed_server():
    def garbage(handler) -> None:
        handler.wfile.write(b"\x16\x03\x01 not an HTTP answer\r\n\r\n")
        handler.close_connection = True

    with scripted_server(garbage) as (url, seen):
        cache = client(url)
        assert cache.get(KEY) is None and cache.down and len(seen) == 1 + remotecache.RETRIES


def test_action_results_round_trip_through_protobuf():
    digest = hashlib.sha256(b"blob").hexdigest()
    raw = remotecache.action_result(digest, 300)
    message = reapi_action_result().FromString(raw)
    assert message.SerializeToString() == raw
    assert remotecache.blob_digest(raw) == (digest, 300)
    message.exit_code = 3
    message.output_files[0].is_executable = True  # fields Kiln does not write are ignored when read,
    message.execution_metadata.worker = "10.0.0.7"  # as bazel-remote adds this one to every action result it stores
    assert remotecache.blob_digest(message.SerializeToString()) == (digest, 300)


def test_a_server_that_always_answers_just_in_time_is_dropped_after_a_few_answers():
    def late(handler) -> None:
        time.sleep(0.3)
        answer(404)(handler)

    with scripted_server(late) as (url, seen):
        cache = client(url, KILN_CACHE_TIMEOUT="0.5")
        assert [cache.get(KEY) for _ in range(5)] == [None] * 5
        assert len(seen) == remotecache.SLOW_ANSWERS and "answers took over 0.25 s to start" in cache.down
