"""A ``jupyter server`` with the extension on loopback, for the benchmarks that time what the panel does.

It starts on a free port with a random token, is ready when ``/api/status`` answers, and is asked
over plain ``http.client`` (one connection per request, as a browser's first request pays):
``request`` gives the status, the bytes on the wire, the headers and the body; ``call`` the JSON.
"""

from __future__ import annotations

import http.client
import json
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class JupyterServer:
    """``jupyter server`` on loopback with ``home`` as its root; its log in ``home/server.log``."""

    def __init__(self, env: dict[str, str], home: Path, *, start_timeout: float = 180.0) -> None:
        self.port, self.token = free_port(), secrets.token_hex(16)
        argv = [sys.executable, "-m", "jupyter_server", f"--port={self.port}", "--ip=127.0.0.1", "--no-browser",
                "--allow-root", f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={home}"]  # fmt: skip
        self.log = (home / "server.log").open("wb")
        self.proc = subprocess.Popen(argv, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + start_timeout
        while time.monotonic() < deadline:
            try:
                if self.request("GET", "/api/status")[0] == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.3)
        self.close()
        raise SystemExit(f"the server did not start; see {home / 'server.log'}")

    def request(
        self, method: str, path: str, body: object = None, headers: dict[str, str] | None = None
    ) -> tuple[int, int, dict[str, str], bytes]:
        """(status, bytes on the wire: status line, headers and body; the headers; the body)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        try:
            data = json.dumps(body) if body is not None else None
            conn.request(method, path, body=data, headers={"Authorization": f"token {self.token}", **(headers or {})})
            resp = conn.getresponse()
            raw = resp.read()
            head = dict(resp.getheaders())
            wire = len(f"HTTP/1.1 {resp.status} {resp.reason}\r\n") + sum(len(f"{k}: {v}\r\n") for k, v in head.items())
            return resp.status, wire + 2 + len(raw), head, raw
        finally:
            conn.close()

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, int, dict[str, str], bytes]:
        return self.request("GET", path, headers=headers)

    def call(self, method: str, path: str, body: object = None) -> Any:
        """The JSON answer; an error status stops the benchmark with what the server said."""
        status, _, _, raw = self.request(method, path, body)
        if status >= 400:
            raise SystemExit(f"{method} {path}: {status} {raw[:500]!r}")
        return json.loads(raw) if raw else None

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
