"""Cache servers for the remote-cache tests and bench/remote_cache.py: a real nginx with WebDAV PUT, a server
that accepts connections and never answers, and a scriptable HTTP server for hostile answers.

Every one listens on 127.0.0.1 on a free port, keeps its files, pid and logs in a temporary folder, and is
stopped when its `with` block ends.
"""
from __future__ import annotations

import contextlib
import grp
import http.server
import os
import pwd
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def nginx_config(folder: Path, root: Path, port: int, auth: str | None = None, tls: bool = False) -> str:
    """An nginx serving `root` on 127.0.0.1:`port` with WebDAV PUT (creating folders), everything else under `folder`.

    `auth` is a whole `Authorization` header value the server requires (401 without it); with `tls`, it speaks
    HTTPS with the certificate `folder`/cert.pem (`self_signed`).
    """
    # Run as root (a CI container), the workers would switch to `nobody`, who cannot enter a private temp folder.
    user = f"user {pwd.getpwuid(os.geteuid()).pw_name} {grp.getgrgid(os.getegid()).gr_name};" if os.geteuid() == 0 else ""
    check = f'if ($http_authorization != "{auth}") {{ return 401; }}' if auth else ""
    temp = "\n".join(f"  {kind}_temp_path {folder / kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    return f"""daemon off;
worker_processes 1;
pid {folder / "nginx.pid"};
error_log {folder / "error.log"} warn;
{user}
events {{ worker_connections 64; }}
http {{
  access_log {folder / "access.log"};
  log_not_found off;
{temp}
  client_max_body_size 0;
  server {{
    listen 127.0.0.1:{port}{" ssl" if tls else ""};
    {f"ssl_certificate {folder / 'cert.pem'}; ssl_certificate_key {folder / 'key.pem'};" if tls else ""}
    root {root};
    location / {{
      {check}
      dav_methods PUT;
      create_full_put_path on;
    }}
  }}
}}
"""


def check_nginx() -> None:
    """nginx is installed (scripts/setup.sh) with its WebDAV module, or a clear error."""
    try:
        built = subprocess.run([NGINX, "-V"], capture_output=True, text=True, timeout=30).stderr
    except OSError:
        raise RuntimeError(f"no nginx at {NGINX}: run ./scripts/setup.sh (Debian package nginx)") from None
    if "--with-http_dav_module" not in built:
        raise RuntimeError(f"{NGINX} was built without http_dav_module, which PUT needs:\n{built}")


def self_signed(folder: Path) -> Path:
    """A certificate for 127.0.0.1 and its key in `folder` (cert.pem, key.pem); returns the certificate."""
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(folder / "key.pem"), "-out", str(folder / "cert.pem"), "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return folder / "cert.pem"


@contextlib.contextmanager
def nginx(folder: Path, root: Path | None = None, auth: str | None = None, tls: bool = False) -> Iterator[str]:
    """Start nginx on a free port serving `root` (default `folder`/root); yields its URL and stops it afterwards.
    With `tls`, it serves HTTPS with a new self-signed certificate, `folder`/cert.pem."""
    check_nginx()
    folder.mkdir(parents=True, exist_ok=True)
    if tls:
        self_signed(folder)
    root = root or folder / "root"
    root.mkdir(exist_ok=True)
    for attempt in range(5):  # another process may take the free port before nginx binds it
        port = free_port()
        conf = folder / "nginx.conf"
        conf.write_text(nginx_config(folder, root, port, auth, tls))
        proc = subprocess.Popen([NGINX, "-p", str(folder), "-c", str(conf), "-e", str(folder / "error.log")],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            if _wait_listening(port, proc):
                yield f"{'https' if tls else 'http'}://127.0.0.1:{port}"
                return
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    raise RuntimeError(f"nginx did not start: {(folder / 'error.log').read_text(errors='replace')}")


def _wait_listening(port: int, proc: subprocess.Popen) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
        time.sleep(0.02)
    return False


@contextlib.contextmanager
def silent_server() -> Iterator[tuple[str, list]]:
    """A server that accepts connections and never answers; yields its URL and the list of connections it took."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list = []
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                accepted.append(listener.accept()[0])

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", accepted
    finally:
        stop.set()
        thread.join()
        for conn in accepted:
            conn.close()
        listener.close()


def closed_port_url() -> str:
    """A URL on which nothing listens: connections are refused."""
    return f"http://127.0.0.1:{free_port()}"


@contextlib.contextmanager
def scripted_server(answer: Callable[[http.server.BaseHTTPRequestHandler], None]) -> Iterator[tuple[str, list]]:
    """An HTTP server whose every request `answer(handler)` handles; yields its URL and the (method, path, headers)
    of the requests it got."""
    seen: list = []

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def handle_one_request(self) -> None:
            with contextlib.suppress(OSError):
                super().handle_one_request()

        def do_GET(self) -> None:
            seen.append((self.command, self.path, dict(self.headers)))
            answer(self)

        do_PUT = do_GET

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
