"""Persistent stage workers: a warm process that runs stage actions without paying Python's and PyTorch's start-up.

A stage run by a fresh process (`python -P -m kiln.runner NAME ...`) spends
most of a small stage's time importing numpy, onnx and torch. A worker, as
Bazel's persistent workers and Gradle's daemon do, keeps them loaded: it is
a fork server. It imports the compiler once, then listens on a Unix socket;
each request is served by a child forked from it, which runs the same
`kiln.runner.main` a fresh process runs, in the caller's folder and with the
caller's standard output and error (passed over the socket; with the build's progress
descriptor too, when it has one: `kiln/stages.py`), and exits. So
a stage's state never outlives its request (a model.py's modules, seeds,
globals) and its output is byte-identical to the fresh process's.

The client side (`run`) is the standard library only: the SCons tool calls
it. A worker is started on demand, one per machine for each Python, Kiln
folder and environment (the socket's name is a digest of them), in a private
folder (`KILN_WORKER_DIR`, else `$XDG_RUNTIME_DIR/kiln-workers`, else
`<tmp>/kiln-workers-<uid>`; mode 0700, checked). It stops when idle for
`KILN_WORKER_IDLE` seconds (default 600) and when a source file of the Kiln
it loaded changes (the request that finds it so starts a new worker). Any
failure of the worker path (no socket, a crash, a protocol error) makes the
caller run the stage in a fresh process: `run` returns None. `KILN_WORKERS=0`
turns workers off.

Signatures do not change: a worker is only a way of running the action.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .stages import PROGRESS_FD_ENV

IDLE_SECONDS = 600.0
START_SECONDS = 60.0  # how long a caller waits for a new worker to bind its socket
# What a worker loads before it serves, and what it loads for a stage once it has forked that stage's first request
# (so the next one finds it loaded; torch only when installed: the ONNX path needs none).
BASE_MODULES = ("numpy", "kiln.runner")
STAGE_MODULES = {
    # torch.export loads dynamo, functorch, sympy and networkx on its first call (seconds): loaded here, not run.
    "import": ("onnx", "torch", "torch.export", "torch._dynamo", "torch._export", "torch._functorch.aot_autograd",
               "torch._inductor", "torch.fx.experimental.symbolic_shapes", "sympy", "networkx",
               "kiln.frontends", "kiln.frontends.onnx", "kiln.frontends.torch_module"),
    "normalize": ("kiln.normalize",),
    "quantize": ("kiln.quantize", "kiln.quantize.calibration"),
    "lower": ("kiln.lower",),
    "plan": ("kiln.plan",),
    "codegen": ("kiln.codegen",),
}
_MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes on Linux, 104 on macOS


def idle_seconds() -> float:
    try:
        return max(0.1, float(os.environ.get("KILN_WORKER_IDLE", IDLE_SECONDS)))
    except ValueError:
        return IDLE_SECONDS


def folder() -> Path:
    """The folder holding this user's worker sockets."""
    if os.environ.get("KILN_WORKER_DIR"):
        return Path(os.environ["KILN_WORKER_DIR"])
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return Path(runtime) / "kiln-workers"
    return Path(tempfile.gettempdir()) / f"kiln-workers-{os.getuid()}"


def private_folder(path: Path) -> bool:
    """Create `path` (mode 0700) if needed; True when it is a folder of ours that no one else can enter."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077


def socket_path(python: str, kiln_root: str, environ: dict[str, str], where: Path) -> Path:
    """The socket of the worker for this Python, Kiln folder and environment (a worker started for one serves only it)."""
    key = json.dumps([python, kiln_root, sorted(environ.items())])
    return where / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.sock"


# -- the caller's side (standard library only: the SCons tool runs it) ---------------------------
def run(python: str, kiln_root: str, environ: dict[str, str], argv: list[str], cwd: str,
        progress: int | None = None) -> int | None:
    """Run `python -P -m kiln.runner *argv` in a worker, in folder `cwd`; its exit status, or None when the worker
    path failed (the caller then runs a fresh process). `environ` is the stage's environment (the worker's);
    the worker settings (`KILN_WORKER_DIR`, `KILN_WORKER_IDLE`) are the caller's own. `progress` is a descriptor
    the stage reports its progress to (`PROGRESS_FD_ENV`): passed with the request, never part of the worker's key."""
    where = folder()
    if not private_folder(where):
        return None
    path = socket_path(python, kiln_root, environ, where)
    if len(str(path)) > _MAX_SOCKET_PATH:
        return None
    for _ in range(3):  # a worker that finds its sources changed stops; the next attempt starts a new one
        conn = _connect(path) or _start(python, environ, path)
        if conn is None:
            return None
        with conn:
            reply = _request(conn, {"argv": argv, "cwd": cwd}, () if progress is None else (progress,))
        if reply is None or reply.get("stale") is not True:
            return reply.get("status") if reply is not None and isinstance(reply.get("status"), int) else None
    return None


def _connect(path: Path) -> socket.socket | None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(path))
    except OSError:
        conn.close()
        return None
    return conn


def _start(python: str, environ: dict[str, str], path: Path) -> socket.socket | None:
    """Start a worker for `path` (one at a time: a lock file), or connect to the one another caller just started."""
    import fcntl

    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        conn = _connect(path)
        if conn is not None:
            return conn
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a dead worker's socket
        # The worker binds the socket, then detaches (this process's child exits), then loads the compiler.
        try:
            proc = subprocess.run([python, "-P", "-m", "kiln.worker", "serve", str(path), str(idle_seconds())],
                                  env=environ, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True, timeout=START_SECONDS, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return _connect(path) if proc.returncode == 0 else None


def _request(conn: socket.socket, request: dict[str, Any], fds: tuple[int, ...] = ()) -> dict[str, Any] | None:
    """Send a request with this process's standard output and error (and `fds`); the worker's reply, or None if it
    broke off."""
    try:
        socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], [1, 2, *fds])
        data = b""
        while not data.endswith(b"\n"):
            chunk = conn.recv(4096)
            if not chunk:
                return None
            data += chunk
        reply = json.loads(data)
    except (OSError, ValueError):
        return None
    return reply if isinstance(reply, dict) else None


def stop_all(where: Path, timeout: float = 10.0) -> int:
    """Ask every worker in `where` to stop and wait until it has; how many there were."""
    pids = []
    for path in sorted(where.glob("*.sock")):
        conn = _connect(path)
        if conn is None:
            continue
        with conn:
            reply = _request(conn, {"stop": True})
        if reply and isinstance(reply.get("pid"), int):
            pids.append(reply["pid"])
    deadline = time.monotonic() + timeout
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return len(pids)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (a child of the caller not yet reaped) has stopped
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return True


# -- the worker ------------------------------------------------------------------------------
def _sources() -> dict[str, tuple[int, int, int]]:
    """The loaded Kiln's source files -> (inode, size, modification time): what a request checks is unchanged."""
    from kiln.stages import package_files

    root = Path(__file__).resolve().parent.parent
    out = {}
    for f in package_files(root):
        info = f.stat()
        out[str(f)] = (info.st_ino, info.st_size, info.st_mtime_ns)
    return out


def _digests(paths: list[str]) -> dict[str, str]:
    out = {}
    for p in paths:
        try:
            out[p] = hashlib.sha256(Path(p).read_bytes()).hexdigest()
        except OSError:
            out[p] = ""
    return out


class Server:
    def __init__(self, listener: socket.socket, path: Path, inode: int, idle: float) -> None:
        self.listener, self.path, self.inode, self.idle = listener, path, inode, idle
        self.children: set[int] = set()
        self.last = time.monotonic()
        self.stamps = _sources()
        self.contents = _digests(list(self.stamps))
        self.serving = True

    def unchanged(self) -> bool:
        """Whether the Kiln sources are what this worker loaded (a changed stamp is checked by content)."""
        now = _sources()
        if set(now) != set(self.stamps):
            return False
        moved = [p for p in now if now[p] != self.stamps[p]]
        if moved and _digests(moved) != {p: self.contents[p] for p in moved}:
            return False
        self.stamps = now
        return True

    def loop(self) -> None:
        while self.serving or self.children:
            self.reap()
            if self.serving and not self.children and time.monotonic() - self.last >= self.idle:
                self.retire()
                continue
            ready, _, _ = select.select([self.listener] if self.serving else [], [], [], 0.2)
            if ready:
                self.accept()

    def reap(self) -> None:
        for pid in list(self.children):
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                self.children.discard(pid)
                self.last = time.monotonic()

    def retire(self) -> None:
        """Stop taking requests (the socket goes, so the next caller starts a new worker); running ones finish."""
        self.serving = False
        with contextlib.suppress(OSError):
            if os.stat(self.path).st_ino == self.inode:  # not a newer worker's
                os.unlink(self.path)
        self.listener.close()

    def accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        self.last = time.monotonic()
        with conn:
            if not _same_user(conn):
                return
            try:
                msg, fds, _, _ = socket.recv_fds(conn, 65536, 3)
            except OSError:
                return
            try:
                request = json.loads(msg)
            except ValueError:
                request = None
            if not isinstance(request, dict):
                _close(fds)
                return
            if request.get("stop"):
                _close(fds)
                _reply(conn, {"pid": os.getpid()})
                self.retire()
                return
            if len(fds) not in (2, 3) or not self.unchanged():
                _close(fds)
                _reply(conn, {"stale": True})
                self.retire()
                return
            try:
                pid = os.fork()
            except OSError:
                _close(fds)
                return  # the caller sees the connection close and runs a fresh process
            if pid == 0:
                self.listener.close()
                _serve(conn, request, fds)  # never returns
            _close(fds)
            self.children.add(pid)
            _load(STAGE_MODULES.get(str(request["argv"][0]) if request.get("argv") else "", ()))


def _load(modules: tuple[str, ...]) -> None:
    import importlib

    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 (an optional frontend not installed: the stage reports it, as a fresh process does)
            pass


def _same_user(conn: socket.socket) -> bool:
    if not hasattr(socket, "SO_PEERCRED"):
        return True  # the socket's folder is private to its owner
    import struct

    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1] == os.getuid()


def _close(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _reply(conn: socket.socket, reply: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        conn.sendall(json.dumps(reply).encode() + b"\n")


def _serve(conn: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: run the stage as a fresh process would, answer its exit status, and exit."""
    status = 1
    try:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        _close([devnull, *fds[:2]])
        if len(fds) == 3:  # the build's progress descriptor: the stage reports to it as a fresh process would
            os.environ[PROGRESS_FD_ENV] = str(fds[2])
        os.chdir(request["cwd"])
        from kiln.runner import main

        sys.argv = ["kiln.runner", *request["argv"]]
        try:
            status = main(list(request["argv"]))
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else 1
        status = status or 0
    except BaseException:  # an error of the worker itself: the caller runs a fresh process
        os._exit(70)
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
    _reply(conn, {"status": int(status)})
    os._exit(0)


def serve(path: Path, idle: float) -> int:
    """Bind `path`, detach (the starting process exits 0 once the socket listens), load the compiler, serve."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        listener.bind(str(path))
    except OSError:
        return 1
    finally:
        os.umask(old_umask)
    listener.listen(64)
    inode = os.stat(path).st_ino
    if os.fork() != 0:
        os._exit(0)  # the caller waits for this exit, then connects; requests queue until the loads are done
    _load(BASE_MODULES)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server = Server(listener, path, inode, idle)
    try:
        server.loop()
    finally:
        if server.serving:
            server.retire()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 3 and args[0] == "serve":
        return serve(Path(args[1]), float(args[2]))
    if len(args) == 2 and args[0] == "stop":
        print(f"stopped {stop_all(Path(args[1]))} worker(s)")
        return 0
    print("usage: python -m kiln.worker serve SOCKET IDLE_SECONDS | stop FOLDER", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
