"""Responses without a Content-Length (chunked transfer encoding): fetched whole and verified (issue 33)."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from jupyter_starverse.catalog import _download as engine
from jupyter_starverse.catalog._download import Downloaded, Target
from jupyter_starverse.catalog._multiget import Get, fetch_many

BODIES = {f"/f{i}.bin": bytes((i * 7 + j) % 251 for j in range(1000 + 4001 * i)) for i in range(6)}


class _Chunked(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        body = BODIES.get(self.path.split("?")[0])
        if body is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        if self.path.endswith(("1.bin", "3.bin", "4.bin")):  # these come chunked, in pieces of 1,000 bytes
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(0, len(body), 1000):
                piece = body[i : i + 1000]
                self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)


@pytest.fixture
def chunked() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Chunked)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _target(path: str, size: bool = True) -> Target:
    body = BODIES[path]
    return Target(path, len(body) if size else None, hashlib.sha256(body).hexdigest())


def test_a_batch_with_chunked_responses_gets_every_file_whole(chunked: str) -> None:
    got: dict[str, bytes] = {}

    def done(get: Get, body: memoryview, out: Downloaded) -> None:
        assert out.size == len(body) and out.sha256 == hashlib.sha256(body).hexdigest()
        got[get.key] = bytes(body)

    gets = [Get(f"{chunked}{p}", _target(p), p) for p in BODIES]
    fetch_many(gets, headers={"User-Agent": "t"}, connections=3, done=done)
    assert got == BODIES


def test_a_chunked_file_of_unknown_size_downloads_and_verifies(chunked: str, tmp_path: Path) -> None:
    path = "/f3.bin"
    body, out = engine.fetch_small(engine.HttpOrigin(f"{chunked}{path}"), _target(path, size=False))
    assert bytes(body) == BODIES[path] and out.size == len(BODIES[path])
    dest = tmp_path / "f3.bin"
    out = engine.download(engine.HttpOrigin(f"{chunked}{path}"), dest, _target(path, size=False))
    part, sidecar = engine.part_paths(dest)
    assert part.read_bytes() == BODIES[path] and out.sha256 == hashlib.sha256(BODIES[path]).hexdigest()
    assert not sidecar.exists()


def test_a_chunked_body_that_does_not_match_the_listed_sha256_is_refused(chunked: str, tmp_path: Path) -> None:
    path = "/f4.bin"
    wrong = Target(path, None, "0" * 64)
    with pytest.raises(engine.ChecksumError):
        engine.download(engine.HttpOrigin(f"{chunked}{path}"), tmp_path / "f4.bin", wrong)
