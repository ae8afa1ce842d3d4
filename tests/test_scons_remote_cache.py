"""The shared build cache on a real server: `--kiln-cache=http://...` against nginx with WebDAV PUT.

A build fills the server; a fresh clone elsewhere runs no action and gets the same bytes; a tampered entry on
the server is a miss, rebuilt and repaired; a down or silent server is dropped once and the build builds; a
read-only build never writes; a server that requires a token gets it. One small zoo model (kws_dscnn_onnx, an
ONNX file: no torch import), so a cold build takes seconds.
"""
from __future__ import annotations

import fcntl
import os
import re
import shutil
from pathlib import Path

import pytest

from cache_servers import closed_port_url, nginx, silent_server
from conftest import copy_repo
from kiln import remotecache
from scons_matrix import build_files, clone_snapshot, fresh_clone, parse_actions, run_scons
from test_scons_cache import env_with, not_from_cache, reports, tree_state

MODEL = "kws_dscnn_onnx"
STAGES = {f"kiln {s} {MODEL}" for s in ("import", "normalize", "quantize", "lower", "plan", "codegen")}
PLANNED = f"build/host/{MODEL}/planned.kir"
TOKEN = "a-ci-token-0123456789"


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """The project with one model, nothing built."""
    return copy_repo(tmp_path_factory.mktemp("source") / "repo", (MODEL,))


@pytest.fixture(scope="module")
def warm(source, tmp_path_factory):
    """A cold build of a clone with the server on, once per session (also across pytest-xdist workers):
    (the server's files, the clone, its actions and log)."""
    session = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        session = session.parent
    folder, done = session / "kiln-remote-cache", session / "kiln-remote-cache.done"
    with open(session / "kiln-remote-cache.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            with nginx(folder / "nginx") as url:
                _, log, _ = run_scons(fresh_clone(source, folder / "first"), "-j2", env=env_with(KILN_CACHE=url))
            (folder / "log").write_text(log)
            done.touch()
    log = (folder / "log").read_text()
    return folder / "nginx" / "root", folder / "first", parse_actions(log)[0], log


def server_copy(warm_root: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(warm_root, tmp_path / "root"))


def blob_holding(root: Path, artifact: bytes) -> Path:
    found = [p for p in (root / "cas").iterdir() if p.read_bytes().endswith(b"\n\n" + artifact)]
    assert len(found) == 1, found
    return found[0]


def summary(log: str) -> str:
    lines = [line for line in log.splitlines() if line.startswith("kiln: cache http://")]
    assert len(lines) == 1, log
    return lines[0]


def test_a_build_fills_the_server(warm):
    root, repo, actions, log = warm
    assert STAGES <= actions and not [a for a in actions if a.startswith("cache ")], log
    built = build_files(repo)
    named = [remotecache.blob_digest(p.read_bytes()) for p in (root / "ac").iterdir()]
    assert sorted(named) == sorted((p.name, p.stat().st_size) for p in (root / "cas").iterdir())  # one blob each
    assert sorted(p.read_bytes().split(b"\n\n", 1)[1] for p in (root / "cas").iterdir()) == sorted(built.values())
    assert re.search(rf"0 hits, \d+ misses, 0 entries refused, {len(built)} stored$", summary(log)), log


def test_a_fresh_clone_with_the_warm_server_runs_nothing_and_gets_the_same_bytes(source, warm, tmp_path):
    root, first, _, _ = warm
    with nginx(tmp_path / "nginx", root=root) as url:
        repo = fresh_clone(source, tmp_path / "another" / "folder" / "clone")
        actions, log, _ = run_scons(repo, "-j2", f"--kiln-cache={url}", env=env_with())
    assert not_from_cache(actions) == set(), log
    built, expected = build_files(repo), build_files(first)
    assert sorted(built) == sorted(expected) and [p for p in built if built[p] != expected[p]] == []
    assert "build/host/firmware" in built
    assert summary(log).endswith(f": {len(built)} hits, 0 misses, 0 entries refused, 0 stored"), log


def test_a_tampered_entry_on_the_server_is_a_miss_rebuilt_and_repaired(source, warm, tmp_path):
    warm_root, first, _, _ = warm
    root = server_copy(warm_root, tmp_path)
    blob = blob_holding(root, (first / PLANNED).read_bytes())
    good = blob.read_bytes()
    blob.write_bytes(good[:-100] + bytes([good[-100] ^ 1]) + good[-99:])
    with nginx(tmp_path / "nginx", root=root) as url:
        repo = fresh_clone(source, tmp_path / "clone")
        actions, log, _ = run_scons(repo, "-j2", env=env_with(KILN_CACHE=url))
    assert len(reports(log)) == 1 and "does not match the digest" in reports(log)[0], log
    assert not_from_cache(actions) == {f"kiln plan {MODEL}"}, log
    assert build_files(repo) == build_files(first)
    assert blob.read_bytes() == good  # the rebuilt entry replaced it
    assert re.search(r" 1 entries refused, 1 stored$", summary(log)), log


@pytest.mark.parametrize("server", ["closed port", "never answers"])
def test_a_down_or_silent_server_is_dropped_once_and_the_build_builds(warm, tmp_path, server):
    """The last two stages, the model's object and both programs to rebuild: the first lookups fail, the others
    never reach the server, and the build ends as the cold one did."""
    _, first, _, _ = warm
    repo = clone_snapshot(first, tmp_path / "clone")
    for artifact in (PLANNED, *(f"build/host/{MODEL}/{MODEL}{suffix}" for suffix in (".c", ".h", ".o", "")), "build/host/firmware"):
        (repo / artifact).unlink()
    if server == "closed port":
        actions, log, _ = run_scons(repo, "-j2", env=env_with(KILN_CACHE=closed_port_url()))
        reason = "connection refused"
    else:
        with silent_server() as (url, accepted):
            actions, log, _ = run_scons(repo, "-j2", env=env_with(KILN_CACHE=url, KILN_CACHE_TIMEOUT="1"))
        assert 1 <= len(accepted) <= 2, accepted  # the first lookup of each of the two jobs, never again
        reason = "no answer within 1 s"
    failures = [line for line in log.splitlines() if "building without it for the rest of this build" in line]
    assert len(failures) == 1 and f"({reason})" in failures[0], log
    assert {a for a in actions if a.startswith("kiln ")} == {f"kiln plan {MODEL}", f"kiln codegen {MODEL}"}, log
    assert len(actions) >= 5 and not [a for a in actions if a.startswith("cache ")], log
    assert build_files(repo) == build_files(first)
    assert re.search(rf"0 hits, [5-9] misses, 0 entries refused, 0 stored; not used after it failed \({reason}\)$", summary(log)), log


def test_readonly_never_writes_to_the_server(source, warm, tmp_path):
    """A refused entry is rebuilt and not replaced: no PUT at all, the server's files stay as they were."""
    warm_root, first, _, _ = warm
    root = server_copy(warm_root, tmp_path)
    blob = blob_holding(root, (first / PLANNED).read_bytes())
    blob.write_bytes(blob.read_bytes()[:-1])
    for p in [root, *root.rglob("*")]:
        os.utime(p, ns=(1, 10**18))
    before = tree_state(root)
    with nginx(tmp_path / "nginx", root=root) as url:
        repo = fresh_clone(source, tmp_path / "clone")
        actions, log, _ = run_scons(repo, "-j2", f"--kiln-cache={url}", "--kiln-cache-readonly", env=env_with())
    assert not_from_cache(actions) == {f"kiln plan {MODEL}"}, log
    assert build_files(repo) == build_files(first)
    assert tree_state(root) == before
    requests = (tmp_path / "nginx" / "access.log").read_text().splitlines()
    assert requests and all('"GET /' in line for line in requests)
    assert summary(log).endswith("0 stored (read-only)"), log


def test_a_server_that_requires_a_token_gets_it_from_the_environment(source, warm, tmp_path):
    warm_root, first, _, _ = warm
    with nginx(tmp_path / "nginx", root=warm_root, auth=f"Bearer {TOKEN}") as url:
        repo = fresh_clone(source, tmp_path / "clone")
        actions, log, _ = run_scons(repo, "-j2", env=env_with(KILN_CACHE=url, KILN_CACHE_TOKEN=TOKEN))
        assert not_from_cache(actions) == set() and build_files(repo) == build_files(first), log
        assert TOKEN not in log
    statuses = [line.split('" ')[1].split()[0] for line in (tmp_path / "nginx" / "access.log").read_text().splitlines()]
    assert statuses and set(statuses) == {"200"}  # let in: without the token nginx answers 401


@pytest.mark.parametrize("setting, message", [
    ({"KILN_CACHE": "ftp://127.0.0.1/cache"}, "starts with http:// or https://"),
    ({"KILN_CACHE": "http://ci:secret@127.0.0.1/"}, "no credentials in the URL"),
    ({"KILN_CACHE": "http://127.0.0.1:1/", "KILN_CACHE_TIMEOUT": "-1"}, "KILN_CACHE_TIMEOUT"),
])
def test_a_bad_server_setting_is_a_one_line_error(source, tmp_path, setting, message):
    repo = fresh_clone(source, tmp_path / "clone")
    actions, log, status = run_scons(repo, env=env_with(**setting), check=False)
    errors = [line for line in log.splitlines() if line.startswith("kiln: error:")]
    assert status == 2 and actions == set() and len(errors) == 1 and message in errors[0], log
    assert "Traceback" not in log and "secret" not in log
