"""Headless Chromium driven over the DevTools protocol on a pipe, to look at a page as a browser renders it.

`--remote-debugging-pipe` reads commands on the browser's fd 3 and writes replies and events on
fd 4, each one JSON message ended by a NUL byte: no port, no websocket library. Every wait has a
deadline, and the browser is killed if it does not close in time. What the page did is kept:
console messages, uncaught exceptions, log entries, and every network request it made.
"""
from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--disable-default-apps", "--remote-debugging-pipe"]


class Browser:
    def __init__(self, profile: Path, timeout: float = 60.0) -> None:
        chromium = shutil.which("chromium")
        assert chromium, "scripts/setup.sh installs Debian's chromium"
        self.timeout = timeout
        commands, self._to_browser = os.pipe()
        self._from_browser, replies = os.pipe()
        commands, replies = (_above_4(fd) for fd in (commands, replies))  # fd 3 or 4 would be closed by the redirections
        # bash (dash takes one-digit descriptors only) puts the pipes where the browser reads and writes, then becomes it.
        script = f'exec "$0" "$@" 3<&{commands} 4>&{replies} {commands}<&- {replies}>&-'
        self.proc = subprocess.Popen(["bash", "-c", script, chromium, *FLAGS, f"--user-data-dir={profile}"],
                                     pass_fds=(commands, replies), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        os.close(commands)
        os.close(replies)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        self.session = ""

    def __enter__(self) -> Browser:
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable")
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.call("Browser.close", session=False)
        except (AssertionError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait(timeout=10)
        os.close(self._to_browser)
        os.close(self._from_browser)

    def call(self, method: str, session: bool = True, **params: Any) -> dict[str, Any]:
        """Send a command (to the page's session unless `session` is False) and return its result."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        reply = self._wait(lambda m: m.get("id") == self._next_id, method)
        assert "error" not in reply, f"{method}: {reply['error']}"
        return reply.get("result", {})

    def open(self, url: str, width: int, height: int) -> None:
        """Load `url` in a window `width` x `height` CSS pixels and wait for its load event."""
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        self.call("Page.navigate", url=url)
        self._wait(lambda m: m.get("method") == "Page.loadEventFired", f"the load event of {url}")

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def seen(self, *methods: str) -> list[dict[str, Any]]:
        """The params of the events of these methods the page has sent so far."""
        return [e["params"] for e in self.events if e.get("method") in methods]

    def _wait(self, wanted, what: str) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                message = json.loads(raw)
                if "method" in message:
                    self.events.append(message)
                if wanted(message):
                    return message
            left = deadline - time.monotonic()
            assert left > 0, f"chromium: no answer within {self.timeout:g} s waiting for {what}"
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if ready:
                chunk = os.read(self._from_browser, 1 << 16)
                assert chunk, f"chromium exited (status {self.proc.poll()}) while waiting for {what}"
                self._buffer += chunk


def _above_4(fd: int) -> int:
    """`fd` moved to a descriptor above 4."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return moved
