"""Many small files over a few kept-alive HTTP connections, from one thread.

The small files of a pull (up to a megabyte each, thousands of them) cost per request, not per
byte. One thread keeps ``connections`` connections per host busy with a ``selectors`` loop, as
``curl -Z`` does: each connection carries one request at a time, its response comes whole into
a buffer, is hashed from it and handed to the caller, and the connection takes the next file at
once. Threads with one blocking connection each spend their time handing the interpreter lock
to each other (a woken thread waits for the one holding it); one loop does not, and parses only
what it needs of a response (status, ``Content-Length``, ``Location``, ``ETag``).

Redirects are followed (``Authorization`` never goes to another host); 5xx/429, resets, short
bodies and timeouts are retried with backoff, as the engine's other paths (:mod:`._download`);
401/403/404 end the batch with :class:`._download.AccessError`. A response without a
``Content-Length`` (chunked) is fetched again through :func:`._download.fetch_small`.
"""

from __future__ import annotations

import contextlib
import heapq
import selectors
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit

from ._download import fetch_small
from ._journal import Downloaded, Target, _check, _Digests, _hex
from ._origins import (
    AccessError,
    HttpOrigin,
    OriginChangedError,
    RetryableError,
    ShortBodyError,
    TransferError,
    _clean_etag,
)
from ._tuning import BACKOFF, BACKOFF_MAX, RETRIES, TIMEOUT

__all__ = ["Get", "GetFailed", "fetch_many"]

_READ = 256 * 1024
_REDIRECTS = (301, 302, 303, 307, 308)


@dataclass
class Get:
    """One file to fetch: its URL, what it must be, and the caller's own handle."""

    url: str
    target: Target
    key: Any = None
    headers: dict[str, str] = field(default_factory=dict)  # set by fetch_many (and stripped on redirects)
    tries: int = 0
    redirects: int = 0


class GetFailed(Exception):
    """The batch stopped: ``get`` failed with ``error`` (a :class:`._download.TransferError`)."""

    def __init__(self, get: Get, error: BaseException) -> None:
        super().__init__(f"{get.target.name}: {error}")
        self.get = get
        self.error = error


class _Conn:
    __slots__ = (
        "buf",
        "fields",
        "get",
        "host",
        "keep",
        "last",
        "length",
        "out",
        "registered",
        "served",
        "sock",
        "status",
        "want",
    )

    def __init__(self, host: tuple[str, str], sock: socket.socket) -> None:
        self.host = host
        self.sock = sock
        self.get: Get | None = None
        self.buf = bytearray()
        self.out = b""  # request bytes not yet sent
        self.want = -1  # bytes of header + body the response needs (-1: headers not read yet)
        self.length = 0  # of the body
        self.status = 0
        self.fields: dict[str, str] = {}
        self.keep = True
        self.served = 0  # responses this connection carried (a dead idle one is retried for free)
        self.last = time.monotonic()
        self.registered = False  # with the selector (a miss there costs a repr of the socket)


class _Loop:
    def __init__(
        self,
        gets: Iterable[Get],
        headers: dict[str, str],
        connections: int,
        done: Callable[[Get, memoryview, Downloaded], None],
        check: Callable[[], None],
    ) -> None:
        self.todo: deque[Get] = deque()
        for g in gets:
            g.headers = dict(headers)
            self.todo.append(g)
        self.connections = max(1, connections)
        self.done, self.check = done, check
        self.sel = selectors.DefaultSelector()
        self.idle: dict[tuple[str, str], list[_Conn]] = {}
        self.busy = 0
        self.later: list[tuple[float, int, Get]] = []  # retries after their backoff
        self.slow: list[Get] = []  # no Content-Length: fetched one by one afterwards
        self._seq = 0
        self._ssl: ssl.SSLContext | None = None

    # connections -------------------------------------------------------------------------------
    def _connect(self, host: tuple[str, str]) -> _Conn:
        scheme, netloc = host
        parts = urlsplit(f"{scheme}://{netloc}")
        port = parts.port or (443 if scheme == "https" else 80)
        name = parts.hostname or netloc
        try:
            sock = socket.create_connection((name, port), timeout=TIMEOUT)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if scheme == "https":
                if self._ssl is None:
                    self._ssl = ssl.create_default_context()
                sock = self._ssl.wrap_socket(sock, server_hostname=name)
        except OSError as e:
            raise RetryableError(f"{scheme}://{netloc}: {e}") from e
        sock.setblocking(False)
        return _Conn(host, sock)

    def _close(self, conn: _Conn) -> None:
        if conn.registered:
            conn.registered = False
            with contextlib.suppress(KeyError, ValueError):
                self.sel.unregister(conn.sock)
        with contextlib.suppress(OSError):
            conn.sock.close()

    def _start(self, get: Get) -> None:
        parts = urlsplit(get.url)
        if parts.scheme not in ("http", "https"):
            raise AccessError(0, get.url, "only http(s) URLs and redirects are followed")
        host = (parts.scheme, parts.netloc)
        pool = self.idle.setdefault(host, [])
        conn = pool.pop() if pool else self._connect(host)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        lines = [f"GET {path} HTTP/1.1", f"Host: {parts.netloc}", "Accept-Encoding: identity"]
        lines += [f"{k}: {v}" for k, v in get.headers.items() if k.lower() not in ("host", "accept-encoding")]
        conn.get, conn.buf, conn.want, conn.last = get, bytearray(), -1, time.monotonic()
        conn.out = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        self.busy += 1
        self._send(conn)

    def _send(self, conn: _Conn) -> None:
        try:
            while conn.out:
                conn.out = conn.out[conn.sock.send(conn.out) :]
        except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
            pass
        except OSError as e:
            return self._broken(conn, e)
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.out else 0)
        if conn.registered:
            self.sel.modify(conn.sock, events, conn)
        else:
            self.sel.register(conn.sock, events, conn)
            conn.registered = True

    # responses ---------------------------------------------------------------------------------
    def _readable(self, conn: _Conn) -> None:
        while True:
            try:
                data = conn.sock.recv(_READ)
            except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return
            except OSError as e:
                return self._broken(conn, e)
            if not data:
                return self._broken(conn, None)
            conn.buf += data
            conn.last = time.monotonic()
            if conn.want < 0:
                self._headers(conn)
            if conn.get is None:
                return  # the response ended the connection (broken, or read by the plain path)
            if 0 <= conn.want <= len(conn.buf):
                return self._complete(conn)

    def _headers(self, conn: _Conn) -> None:
        """Parse the status and headers once they are in (``conn.want`` set), else wait for more."""
        end = conn.buf.find(b"\r\n\r\n")
        if end < 0:
            if len(conn.buf) > 64 * 1024:
                self._broken(conn, OSError("response headers longer than 64 KiB"))
            return
        head = bytes(conn.buf[:end]).decode("latin-1").split("\r\n")
        get = conn.get
        assert get is not None
        try:
            status = int(head[0].split(" ", 2)[1])
        except (IndexError, ValueError):
            self._broken(conn, OSError(f"not an HTTP response: {head[0][:80]!r}"))
            return
        fields: dict[str, str] = {}
        for line in head[1:]:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        length = fields.get("content-length")
        conn.served += 1
        if length is None or not length.isdigit() or "chunked" in fields.get("transfer-encoding", "").lower():
            self._close(conn)
            self.busy -= 1
            conn.get = None
            if status == 200:
                self.slow.append(get)  # no length to read to: the plain path reads it
            else:
                self._error(get, status, fields, b"")
            return
        conn.length = int(length)
        conn.want = end + 4 + conn.length
        conn.fields, conn.status = fields, status
        conn.keep = fields.get("connection", "").lower() != "close"

    def _complete(self, conn: _Conn) -> None:
        get = conn.get
        assert get is not None
        body = memoryview(conn.buf)[conn.want - conn.length : conn.want]
        status, fields = conn.status, conn.fields
        conn.get = None
        self.busy -= 1
        extra = len(conn.buf) > conn.want  # nothing may follow: one request at a time
        if conn.keep and not extra:
            if conn.registered:
                conn.registered = False
                with contextlib.suppress(KeyError, ValueError):
                    self.sel.unregister(conn.sock)
            self.idle.setdefault(conn.host, []).append(conn)
        else:
            self._close(conn)
        try:
            if status == 200:
                digests = _Digests(get.target)
                digests.update(body)
                out = Downloaded(len(body), digests.sha.hexdigest(), _clean_etag(fields.get("etag")), _hex(digests))
                try:
                    _check(get.target, out)
                    self.done(get, body, out)
                except TransferError as e:
                    raise GetFailed(get, e) from e
            else:
                self._error(get, status, fields, bytes(body))
        finally:
            body.release()

    def _error(self, get: Get, status: int, fields: dict[str, str], body: bytes) -> None:
        if status in _REDIRECTS and fields.get("location"):
            get.redirects += 1
            if get.redirects > 10:
                raise GetFailed(get, AccessError(310, get.url, "too many redirects"))
            new = urljoin(get.url, fields["location"])
            if urlsplit(new).netloc != urlsplit(get.url).netloc:
                get.headers = {k: v for k, v in get.headers.items() if k.lower() != "authorization"}
            get.url = new
            self.todo.appendleft(get)
        elif status in (408, 425, 429) or status >= 500 or status in _REDIRECTS:
            self._retry(get, RetryableError(f"{get.url}: HTTP {status}"))
        elif status == 416:
            raise GetFailed(get, OriginChangedError(f"{get.url}: the file is shorter than listed"))
        else:
            raise GetFailed(get, AccessError(status, get.url, body.decode("utf-8", "replace")[:200]))

    def _broken(self, conn: _Conn, e: OSError | None) -> None:
        get = conn.get
        got = len(conn.buf)
        fresh = conn.served == 0
        self._close(conn)
        if get is None:
            return
        conn.get = None
        self.busy -= 1
        if got == 0 and not fresh:
            self.todo.appendleft(get)  # a kept-alive connection the server had closed: once more, free
            return
        if conn.want >= 0:
            start = conn.want - conn.length
            self._retry(get, ShortBodyError(get.url, max(0, got - start), conn.length))
        else:
            self._retry(get, RetryableError(f"{get.url}: the connection broke: {e or 'closed'}"))

    def _retry(self, get: Get, e: TransferError) -> None:
        get.tries += 1
        if get.tries > RETRIES:
            raise GetFailed(get, e)
        self._seq += 1
        delay = min(BACKOFF_MAX, BACKOFF * 2 ** (get.tries - 1))
        heapq.heappush(self.later, (time.monotonic() + delay, self._seq, get))

    # the loop ----------------------------------------------------------------------------------
    def run(self) -> None:
        try:
            while self.todo or self.later or self.busy:
                self.check()
                now = time.monotonic()
                while self.later and self.later[0][0] <= now:
                    self.todo.append(heapq.heappop(self.later)[2])
                while self.todo and self.busy < self.connections:
                    get = self.todo.popleft()
                    try:
                        self._start(get)
                    except RetryableError as e:
                        self._retry(get, e)
                    except TransferError as e:
                        raise GetFailed(get, e) from e
                if not self.busy:
                    if self.later:
                        time.sleep(max(0.0, min(1.0, self.later[0][0] - time.monotonic())))
                    continue
                wait = 1.0 if not self.later else max(0.0, min(1.0, self.later[0][0] - now))
                for key, events in self.sel.select(wait):
                    conn: _Conn = key.data
                    if events & selectors.EVENT_WRITE and conn.out:
                        self._send(conn)
                    if events & selectors.EVENT_READ:
                        self._readable(conn)
                self._timeouts()
        finally:
            for pool in self.idle.values():
                for conn in pool:
                    with contextlib.suppress(OSError):
                        conn.sock.close()
            for key in list(self.sel.get_map().values()):
                with contextlib.suppress(OSError):
                    key.fileobj.close()  # type: ignore[union-attr]
            self.sel.close()

    def _timeouts(self) -> None:
        now = time.monotonic()
        for key in list(self.sel.get_map().values()):
            conn: _Conn = key.data
            if conn.get is not None and now - conn.last > TIMEOUT:
                self._broken(conn, OSError(f"no bytes for {TIMEOUT:.0f} s"))


def fetch_many(
    gets: Iterable[Get],
    *,
    headers: dict[str, str],
    connections: int,
    done: Callable[[Get, memoryview, Downloaded], None],
    check: Callable[[], None] = lambda: None,
) -> None:
    """Fetch every ``get`` over up to ``connections`` connections at once; ``done`` gets each verified body.

    ``done(get, body, downloaded)`` runs in this thread, in completion order; ``body`` is valid
    only during the call. ``check()`` runs between events (it raises to stop the batch). The
    first file that fails for good stops the batch with :class:`GetFailed`.
    """
    loop = _Loop(gets, headers, connections, done, check)
    loop.run()
    for get in loop.slow:
        try:
            body, out = fetch_small(HttpOrigin(get.url, headers=get.headers), get.target)
        except TransferError as e:
            raise GetFailed(get, e) from e
        check()
        done(get, body, out)
