"""Persistent stage workers (`kiln/worker.py`): the same bytes as fresh stage processes, a fresh process when a
worker breaks, a new worker when Kiln's sources change, and no worker left behind (idle or stopped)."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from pathlib import Path

import pytest

from conftest import copy_repo
from scons_matrix import ONNX_MODEL, TORCH_MODEL, add_onnx_model, build_files, run_scons, set_key
from kiln import worker


def worker_pids(folder: Path) -> set[int]:
    """The processes running `kiln.worker serve` on a socket in `folder` (found in /proc, not asked)."""
    pids = set()
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"kiln.worker" in argv and b"serve" in argv and any(a.startswith(str(folder).encode()) for a in argv):
            pids.add(int(entry.name))
    return pids


@pytest.fixture
def workers(monkeypatch):
    """Workers on, in a folder of this test's (short: a socket path has a length limit); stopped afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="kw"))
    monkeypatch.setenv("KILN_WORKERS", "1")
    monkeypatch.setenv("KILN_WORKER_DIR", str(folder))
    yield folder
    worker.stop_all(folder)
    deadline = time.monotonic() + 10
    while worker_pids(folder) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = worker_pids(folder)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    shutil.rmtree(folder, ignore_errors=True)
    assert not left, f"workers left running: {left}"


def small_repo(dest: Path) -> Path:
    repo = copy_repo(dest, (TORCH_MODEL,))
    add_onnx_model(repo / "models" / ONNX_MODEL)
    return repo


def test_a_worker_builds_the_bytes_fresh_processes_build(tmp_path, workers, monkeypatch):
    fresh, warm = small_repo(tmp_path / "fresh"), small_repo(tmp_path / "warm")
    run_scons(fresh, "-j2", env={**os.environ, "KILN_WORKERS": "0"})
    assert not list(workers.glob("*.sock"))
    actions, log, _ = run_scons(warm, "-j2")
    assert len(worker_pids(workers)) == 1, log  # one warm worker served both models' stages
    assert {a for a in actions if a.startswith("kiln ")} == {f"kiln {s} {m}" for s in
                                                             ("import", "normalize", "quantize", "lower", "plan", "codegen")
                                                             for m in (TORCH_MODEL, ONNX_MODEL)}
    ours, theirs = build_files(warm), build_files(fresh)
    assert sorted(ours) == sorted(theirs)
    assert [p for p in ours if ours[p] != theirs[p]] == []
    # A stage's error reaches the build log the same way, and fails the build.
    (warm / "models" / TORCH_MODEL / "model.py").write_text("def model(:\n")
    _, log, status = run_scons(warm, check=False)
    assert status != 0 and sum("kiln: error:" in line and "model.py" in line for line in log.splitlines()) == 1, log


def test_a_crashed_or_broken_worker_falls_back_to_a_fresh_process(tmp_path, workers):
    """A stage whose worker child dies (the model's code kills it, once) and a worker that answers nonsense: the
    build runs the stage in a fresh process and succeeds, with the bytes of a build without workers."""
    repo = small_repo(tmp_path / "repo")
    marker = tmp_path / "crash-once"
    marker.touch()
    model_py = repo / "models" / TORCH_MODEL / "model.py"
    model_py.write_text(f"import os, pathlib\n_m = pathlib.Path({str(marker)!r})\n"
                        "if _m.exists():\n    _m.unlink()\n    os._exit(9)\n" + model_py.read_text())
    actions, log, _ = run_scons(repo, "-j2")
    assert not marker.exists() and f"kiln import {TORCH_MODEL}" in actions, log
    fresh = small_repo(tmp_path / "fresh")
    shutil.copy2(model_py, fresh / "models" / TORCH_MODEL / "model.py")
    run_scons(fresh, "-j2", env={**os.environ, "KILN_WORKERS": "0"})
    assert build_files(repo) == build_files(fresh)

    worker.stop_all(workers)
    sockets = [p for p in workers.glob("*.sock")]
    assert sockets == [] or all(not p.exists() for p in sockets)
    # A "worker" that reads the request and replies with garbage, on the socket the build would use.
    path = next(iter(workers.glob("*.lock"))).with_suffix(".sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(8)
    served, done = [], threading.Event()

    def garbage() -> None:
        server.settimeout(0.2)
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                _, fds, _, _ = socket.recv_fds(conn, 65536, 2)
                for fd in fds:  # the build's output pipes: held open, the build would never end
                    os.close(fd)
                conn.sendall(b"not json\n")
                served.append(1)

    thread = threading.Thread(target=garbage, daemon=True)
    thread.start()
    try:
        set_key(repo / "models" / TORCH_MODEL / "model.toml", "plan", "alignment", 32)
        actions, log, _ = run_scons(repo)
    finally:
        done.set()
        thread.join()
        server.close()
    assert served and f"kiln plan {TORCH_MODEL}" in actions, log


def test_a_worker_stops_when_kiln_changes_and_when_idle(tmp_path, workers, monkeypatch):
    monkeypatch.setenv("KILN_WORKER_IDLE", "120")
    repo = small_repo(tmp_path / "repo")
    run_scons(repo, f"{ONNX_MODEL}-normalize")
    first = worker_pids(workers)
    assert len(first) == 1
    # An edit of a Kiln source file: the worker that loaded the old one retires (long before its idle time) and
    # a new one serves; this one idles out after 1.5 s.
    plan = repo / "kiln" / "plan" / "__init__.py"
    plan.write_text(plan.read_text() + "\n# an edit\n")
    monkeypatch.setenv("KILN_WORKER_IDLE", "1.5")
    run_scons(repo, f"{ONNX_MODEL}-quantize")
    deadline = time.monotonic() + 20
    while worker_pids(workers) & first and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not worker_pids(workers) & first
    deadline = time.monotonic() + 30
    while worker_pids(workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not worker_pids(workers)
    assert not list(workers.glob("*.sock"))
