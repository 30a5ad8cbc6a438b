"""One download engine for every file the store pulls.

A file of known size at least :data:`SPLIT_AT` bytes is cut into :data:`PIECE`-sized ranges
fetched over ``connections`` connections at once and written in place (``os.pwrite``) into
``.NAME.part``; smaller files (and origins without ``Range``) come as one stream each, and
callers fetch several of them at once. Bytes are hashed (sha256, plus any extra digest the
caller wants) *in file order while they arrive*, from the buffers that were just written, so
the file is never read a second time; a flusher thread ``fdatasync``s the part file while
data arrives, so the final sync at the end has little left to do.

A split file starts on two connections and opens the rest once their rate is measured; the
rest are closed again when they add less than a quarter (an origin that is fast over one link,
not limited per connection, gains nothing from more and only loses CPU to them).

Resume: every ~:data:`SYNC_EVERY` bytes, after a sync, the pieces that are on disk are recorded
in a small sidecar (``.NAME.ranges``: size, ETag, piece size, completed pieces). A pull killed
with ``kill -9`` continues from those pieces (they are re-read once to hash them); an origin
whose ETag or size changed restarts the file from zero, with a note in the log.

Each piece is retried with exponential backoff on 5xx/429, resets, timeouts and short bodies,
from the byte where it stopped. 401/403/404 are not retried: the caller turns them into a
clear error naming the file.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import http.client
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urljoin, urlsplit

from ._lease import Lease
from ._perms import make_dirs
from ._progress import ProgressTracker

__all__ = [
    "CHUNK",
    "PIECE",
    "SPLIT_AT",
    "AccessError",
    "Downloaded",
    "FsspecOrigin",
    "HttpOrigin",
    "Origin",
    "OriginChangedError",
    "RetryableError",
    "Target",
    "TransferError",
    "copy_local",
    "download",
    "fetch_small",
    "part_paths",
    "share_connections",
]

log = logging.getLogger(__name__)

CHUNK = 1024 * 1024
PIECE = 8 * 1024 * 1024
SPLIT_AT = 2 * PIECE
SYNC_EVERY = 64 * 1024 * 1024
RAMP_FIRST = 2  # connections a ranged file starts with; then all, kept if they add RAMP_GAIN
RAMP_GAIN = 1.25
RAMP_INTERVAL = 0.05  # seconds of transfer per measurement (longer when the first bytes were slow)
SUBREAD = 256 * 1024  # bytes per read call: the ramp's measurements move in these steps
FILES_AT_ONCE = 4  # large files of one pull fetched at once
VERDICT_SECONDS = 30.0  # how long one file's ramp verdict holds for the other files of its host
SYNC_SECONDS = 1.0  # and at least this often while pieces complete (what a resume can reuse)
RETRIES = 6
BACKOFF = 0.25  # seconds, doubled per try, at most BACKOFF_MAX
BACKOFF_MAX = 8.0
TIMEOUT = 60.0
_datasync: Callable[[int], None] = getattr(os, "fdatasync", os.fsync)  # macOS has no fdatasync


class TransferError(Exception):
    """Base of the engine's own errors (the catalog translates them into StarverseErrors)."""


class RetryableError(TransferError):
    """A 5xx, 429, reset, timeout or short body: try the range again."""


class ShortBodyError(RetryableError):
    """The body ended before the announced length (a reset, or a source that shrank)."""

    def __init__(self, label: str, at: int, announced: int | None = None) -> None:
        of = f" of {announced}" if announced is not None else ""
        super().__init__(f"{label}: the body ended early at byte {at}{of}")
        self.at = at


def _same_short(e: RetryableError, last: int | None) -> int | None:
    """Raise OriginChangedError when a body ends early at the same byte twice: the file changed size."""
    if not isinstance(e, ShortBodyError):
        return last
    if last == e.at:
        raise OriginChangedError(f"the source changed size (its body ends at byte {e.at}, shorter than announced)")
    return e.at


class AccessError(TransferError):
    """401/403/404/410 and similar: retrying cannot help."""

    def __init__(self, status: int, url: str, detail: str = "") -> None:
        super().__init__(f"HTTP {status} for {url}" + (f": {detail}" if detail else ""))
        self.status = status
        self.url = url


class OriginChangedError(TransferError):
    """The ETag or size seen in a response differs from the one the download started with."""


class LeaseLost(TransferError):
    """Another process took our lease over: stop writing."""


class Aborted(TransferError):
    """Another worker of the same file failed."""


class Response(Protocol):
    size: int | None  # the whole file's size, when the origin said it
    etag: str | None
    ranged: bool  # True when the body is the requested range (206), False for the whole file

    def readinto(self, buf: memoryview) -> int: ...

    def close(self) -> None: ...


class Origin(Protocol):
    """Where a file's bytes come from: ``stream(start, end)`` opens ``[start, end)`` (end None: to EOF)."""

    label: str

    def stream(self, start: int, end: int | None) -> Response: ...


# -- HTTP ---------------------------------------------------------------------------------------
class _Connections(threading.local):
    """One keep-alive connection per thread and host."""

    def __init__(self) -> None:
        self.conns: dict[tuple[str, str], http.client.HTTPConnection] = {}


_CONNS = _Connections()


def _conn(scheme: str, netloc: str, timeout: float) -> http.client.HTTPConnection:
    key = (scheme, netloc)
    conn = _CONNS.conns.get(key)
    if conn is None:
        cls = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
        conn = cls(netloc, timeout=timeout)
        _CONNS.conns[key] = conn
    return conn


def _drop_conn(scheme: str, netloc: str) -> None:
    conn = _CONNS.conns.pop((scheme, netloc), None)
    if conn is not None:
        with contextlib.suppress(Exception):
            conn.close()


class _HttpResponse:
    def __init__(
        self, resp: http.client.HTTPResponse, scheme: str, netloc: str, *, ranged: bool, start: int, label: str
    ) -> None:
        self._resp = resp
        self._pos = start
        self._label = label
        self._key = (scheme, netloc)
        self.ranged = ranged
        self.etag = _clean_etag(resp.getheader("ETag"))
        self.size: int | None = None
        if ranged:
            total = (resp.getheader("Content-Range") or "").rsplit("/", 1)[-1]
            self.size = int(total) if total.isdigit() else None
        else:
            length = resp.getheader("Content-Length")
            self.size = int(length) if length and length.isdigit() else None
        self.remaining = resp.length

    def readinto(self, buf: memoryview) -> int:
        try:
            n = self._resp.readinto(buf)
        except http.client.IncompleteRead as e:
            _drop_conn(*self._key)
            raise ShortBodyError(self._label, self._pos + len(e.partial)) from e
        except (OSError, http.client.HTTPException) as e:
            _drop_conn(*self._key)
            raise RetryableError(f"{self._label}: the connection broke at byte {self._pos}: {e}") from e
        self._pos += n
        return n

    def close(self) -> None:
        if self._resp.isclosed() and not self._resp.will_close and not self._resp.length:
            return  # body read to the end: the connection is reused
        self._resp.close()
        _drop_conn(*self._key)


def _clean_etag(value: str | None) -> str | None:
    if not value:
        return None
    value = value.strip()
    if value.startswith("W/"):
        value = value[2:]
    return value.strip('"') or None


class HttpOrigin:
    """A URL served over HTTP(S); redirects are followed once and the final URL is kept.

    ``headers`` go to the first host only (an ``Authorization`` never follows a redirect to
    another host, e.g. the Hub's CDN, which signs its own URLs).
    """

    def __init__(self, url: str, headers: dict[str, str] | None = None, *, timeout: float = TIMEOUT) -> None:
        self.label = url
        self.url = url
        self.link = urlsplit(url).netloc  # what the files of one host share (the ramp's measurements)
        self.headers = dict(headers or {})
        self.timeout = timeout
        self._lock = threading.Lock()

    def stream(self, start: int, end: int | None) -> Response:
        url = self.url
        headers = dict(self.headers)
        for _ in range(10):
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https"):
                raise AccessError(0, url, "only http(s) redirects are followed")
            path = parts.path or "/"
            if parts.query:
                path += "?" + parts.query
            send = {"Accept-Encoding": "identity", **headers}
            if start > 0 or end is not None:
                send["Range"] = f"bytes={start}-" + ("" if end is None else str(end - 1))
            for fresh in (False, True):
                conn = _conn(parts.scheme, parts.netloc, self.timeout)
                reused = conn.sock is not None
                try:
                    conn.request("GET", path, headers=send)
                    resp = conn.getresponse()
                    break
                except (OSError, http.client.HTTPException) as e:
                    _drop_conn(parts.scheme, parts.netloc)
                    if reused and not fresh:
                        continue  # the server closed an idle keep-alive connection: once more on a new one
                    raise RetryableError(f"{url}: {e}") from e
            status = resp.status
            if status in (301, 302, 303, 307, 308):
                location = resp.getheader("Location")
                resp.read()
                if not location:
                    raise RetryableError(f"{url}: redirect without a Location")
                new = urljoin(url, location)
                if urlsplit(new).netloc != parts.netloc:
                    headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
                url = new
                continue
            if status in (200, 206):
                if url != self.url:
                    with self._lock:  # later ranges go straight to where we were sent
                        self.url, self.headers = url, headers
                return _HttpResponse(
                    resp, parts.scheme, parts.netloc, ranged=status == 206, start=start, label=self.label
                )
            body = resp.read(2048)
            resp.close()
            _drop_conn(parts.scheme, parts.netloc)
            if status == 416:
                raise OriginChangedError(f"{url}: the range {start}- is beyond the end of the file now")
            if status in (408, 425, 429) or status >= 500:
                raise RetryableError(f"{url}: HTTP {status}")
            raise AccessError(status, url, body.decode("utf-8", "replace")[:200])
        raise AccessError(310, url, "too many redirects")


# -- fsspec --------------------------------------------------------------------------------------
class _BytesResponse:
    def __init__(self, data: bytes, *, size: int | None, etag: str | None, ranged: bool) -> None:
        self._data = memoryview(data)
        self._pos = 0
        self.size, self.etag, self.ranged = size, etag, ranged

    def readinto(self, buf: memoryview) -> int:
        n = min(len(buf), len(self._data) - self._pos)
        buf[:n] = self._data[self._pos : self._pos + n]
        self._pos += n
        return n

    def close(self) -> None:
        self._data.release()


class _FileResponse:
    def __init__(self, f: Any, *, size: int | None, etag: str | None) -> None:
        self._f, self.size, self.etag, self.ranged = f, size, etag, False

    def readinto(self, buf: memoryview) -> int:
        try:
            data = self._f.read(len(buf))
        except FileNotFoundError:
            raise
        except Exception as e:
            raise RetryableError(str(e)) from e
        buf[: len(data)] = data
        return len(data)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._f.close()


class FsspecOrigin:
    """A file of any fsspec filesystem: ranges with ``cat_file(path, start, end)`` (s3, gcs, abfs, ...)."""

    def __init__(self, fs: Any, path: str, *, size: int | None, etag: str | None) -> None:
        self.fs, self.path, self.label = fs, path, path
        protocol = getattr(fs, "protocol", "fsspec")
        self.link = protocol if isinstance(protocol, str) else protocol[0]
        self._size, self._etag = size, etag

    def stream(self, start: int, end: int | None) -> Response:
        try:
            if start == 0 and end is None:
                return _FileResponse(self.fs.open(self.path, "rb"), size=self._size, etag=self._etag)
            data = self.fs.cat_file(self.path, start=start, end=end)
        except (FileNotFoundError, PermissionError):
            raise
        except Exception as e:  # botocore, aiohttp, gcsfs ...: no common base class
            raise RetryableError(f"{self.path}: {e}") from e
        return _BytesResponse(data, size=self._size, etag=self._etag, ranged=True)


# -- the engine -----------------------------------------------------------------------------------
@dataclass
class Target:
    """What the caller knows about the file before it is fetched."""

    name: str  # shown in messages (the file's path in the entry)
    size: int | None
    sha256: str | None = None  # expected digest, checked at the end when given
    extra: dict[str, Any] = field(default_factory=dict)  # more hashlib objects fed the same bytes


@dataclass(frozen=True)
class Downloaded:
    size: int
    sha256: str
    etag: str | None
    extra: dict[str, str]
    resumed_bytes: int = 0


def part_paths(dest: Path) -> tuple[Path, Path]:
    """The ``.part`` file and the sidecar of completed ranges for ``dest``."""
    return dest.with_name(f".{dest.name}.part"), dest.with_name(f".{dest.name}.ranges")


class _Piece:
    __slots__ = ("chunks", "done", "end", "got", "start")

    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end
        self.chunks: list[tuple[bytearray | bytes, int]] = []
        self.got = 0
        self.done = False


def _read_sidecar(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("done"), list):
        return None
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in data["done"]):
        return None
    if not isinstance(data.get("size"), int) or not isinstance(data.get("piece"), int):
        return None
    return data


def _sidecar_room(data: dict[str, Any]) -> int:
    """Bytes a sidecar of this file takes with every piece done: every sidecar is padded to it."""
    pieces = -(-int(data["size"]) // max(1, int(data["piece"])))
    return len(json.dumps({**data, "done": list(range(pieces))})) + 1


def _write_sidecar(path: Path, data: dict[str, Any]) -> None:
    """Write the sidecar atomically, padded (JSON allows trailing blanks) to the size it has when complete.

    On a full disk (the moment a pull most needs it to keep its pieces) the new copy cannot be
    written; the sidecar already on disk holds blocks enough for any content, so it is rewritten
    in place instead, needing no new space.
    """
    text = json.dumps(data)
    raw = text.encode().ljust(_sidecar_room(data), b" ")
    tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        tmp.write_bytes(raw)
        tmp.replace(path)
    except OSError as e:
        if e.errno != errno.ENOSPC or not path.exists():
            raise
        fd = os.open(path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            os.pwrite(fd, raw, 0)
            _datasync(fd)
        finally:
            os.close(fd)
    finally:
        tmp.unlink(missing_ok=True)


class _Digests:
    def __init__(self, target: Target) -> None:
        self._target = target
        self.reset()

    def reset(self) -> None:
        self.sha = hashlib.sha256()
        self.extra = {k: h.copy() for k, h in self._target.extra.items()}

    def update(self, data: memoryview | bytes) -> None:
        self.sha.update(data)
        for h in self.extra.values():
            h.update(data)


class _Meter:
    """Bytes from one origin host, over every file this process fetches from it at once.

    Files of one pull (4 shards) share the link to their origin: the first file to ramp
    measures the host's rate before and after its extra connections, when every connection
    to the host carries bytes, and its verdict (more connections help or not) holds for the
    files that ramp in the next :data:`VERDICT_SECONDS`.
    """

    def __init__(self) -> None:
        self.stepping = threading.Lock()
        self.verdict: tuple[float, bool] | None = None  # (when, extra connections helped)
        self._lock = threading.Lock()
        self._live: list[tuple[list[int], list[bool | None]]] = []
        self._finished = 0

    def register(self, n: int) -> tuple[list[int], list[bool | None]]:
        """Byte counts and states (None: not started, False: waiting for its first bytes) of n workers."""
        out: tuple[list[int], list[bool | None]] = ([0] * n, [None] * n)
        with self._lock:
            self._live.append(out)
        return out

    def release(self, counters: list[int]) -> None:
        with self._lock:
            self._live = [c for c in self._live if c[0] is not counters]
            self._finished += sum(counters)

    def total(self) -> int:
        with self._lock:
            return self._finished + sum(sum(c) for c, _ in self._live)

    def flowing(self) -> bool:
        """True when every started connection to the host has its first bytes."""
        with self._lock:
            return all(state is not False for _, states in self._live for state in states)

    def fresh_verdict(self) -> bool | None:
        if self.verdict is None or time.monotonic() - self.verdict[0] > VERDICT_SECONDS:
            return None
        return self.verdict[1]


_METERS: dict[str, _Meter] = {}
_METERS_LOCK = threading.Lock()


def _meter(origin: Origin) -> _Meter:
    key = getattr(origin, "link", origin.label)
    with _METERS_LOCK:
        return _METERS.setdefault(key, _Meter())


class _Ranged:
    """Pieces of one file over several connections, hashed in order by one thread.

    A file starts on :data:`RAMP_FIRST` connections; once the origin's rate is measured, all
    ``connections`` open, and if they add less than ``RAMP_GAIN - 1`` of what the first ones
    carried, the extra workers stop after their current piece. An origin that limits every
    connection (a CDN) gets all of them; one that is already fast over two (a mirror on the
    LAN, loopback) is not split further, where extra connections only take CPU that hashing
    and writing need (on two cores, 8 connections to an unlimited origin pulled at 0.7x the
    rate of 2). The rate measured is the host's (:class:`_Meter`), so files fetched at once
    judge their extra connections by what they add to the whole pull.
    """

    def __init__(
        self,
        origin: Origin,
        fd: int,
        size: int,
        etag: str | None,
        done_before: set[int],
        sidecar: Path,
        digests: _Digests,
        connections: int,
        tracker: ProgressTracker | None,
        leases: Sequence[Lease],
        first: tuple[int, Response] | None,
    ) -> None:
        self.origin, self.fd, self.size, self.etag = origin, fd, size, etag
        self.sidecar, self.digests, self.tracker, self.leases = sidecar, digests, tracker, leases
        self.pieces = [_Piece(s, min(size, s + PIECE)) for s in range(0, size, PIECE)]
        self.done_before = {i for i in done_before if i < len(self.pieces)}
        self.todo = [i for i in range(len(self.pieces)) if i not in self.done_before]
        self.connections = max(1, min(connections, len(self.todo) or 1))
        self.window = 2 * self.connections + 2
        self.limit = min(RAMP_FIRST, self.connections)  # workers allowed to take pieces now
        self._meter = _meter(origin)
        # bytes per worker and whether it has its first bytes (the ramp's measurements)
        self._received, self._flowing = self._meter.register(self.connections)
        self.ramp: list[tuple[int, float]] = []  # (connections, MB/s) per step: for logs and tests
        self.first = first
        self.cond = threading.Condition()
        self.frontier = 0  # next piece the hasher needs
        self.error: BaseException | None = None
        self.completed: set[int] = set()
        self._unsynced = 0
        self._sync_wanted = threading.Event()
        self._stop = threading.Event()
        self._free: list[bytearray | bytes] = []  # CHUNK-sized buffers already hashed: no new allocation

    def _buffer(self) -> bytearray:
        with self.cond:
            if self._free:
                raw = self._free.pop()
                assert isinstance(raw, bytearray)
                return raw
        return bytearray(CHUNK)

    # workers ---------------------------------------------------------------------------------
    def _take(self, k: int) -> int | None:
        with self.cond:
            while True:
                if self.error is not None:
                    raise Aborted()
                if not self.todo or k >= self.limit:
                    return None
                if self.todo[0] < self.frontier + self.window:
                    return self.todo.pop(0)
                self.cond.wait(0.5)

    def _worker(self, k: int) -> None:
        try:
            while (i := self._take(k)) is not None:
                self._fetch(i, k)
        except BaseException as e:
            self._fail(e)
        finally:
            if self._flowing[k] is False:
                self._flowing[k] = None  # ended before its first bytes: the ramp stops waiting for it

    def _fail(self, e: BaseException) -> None:
        with self.cond:
            if self.error is None or isinstance(self.error, Aborted):
                self.error = e
            self.cond.notify_all()

    def _fetch(self, i: int, k: int) -> None:
        piece = self.pieces[i]
        tries = 0
        short: int | None = None
        while piece.start + piece.got < piece.end:
            resp: Response | None = None
            try:
                pos = piece.start + piece.got
                if self.first is not None and self.first[0] == i and piece.got == 0:
                    resp = self.first[1]
                    self.first = None
                else:
                    resp = self.origin.stream(pos, piece.end)
                    if not resp.ranged:
                        raise OriginChangedError(f"{self.origin.label}: the origin stopped honouring Range")
                    if (resp.etag or self.etag) and resp.etag != self.etag:
                        raise OriginChangedError(
                            f"{self.origin.label}: the ETag changed during the pull ({self.etag} -> {resp.etag})"
                        )
                    if resp.size is not None and resp.size != self.size:
                        raise OriginChangedError(
                            f"{self.origin.label}: the size changed during the pull ({self.size} -> {resp.size})"
                        )
                self._read(piece, resp, k)
            except RetryableError as e:
                short = _same_short(e, short)
                tries += 1
                if tries > RETRIES:
                    raise
                delay = min(BACKOFF_MAX, BACKOFF * 2 ** (tries - 1))
                log.info("retrying %s bytes %d-%d in %.2fs: %s", self.origin.label, pos, piece.end, delay, e)
                time.sleep(delay)
            finally:
                if resp is not None:
                    resp.close()
        with self.cond:
            piece.done = True
            self.completed.add(i)
            self.cond.notify_all()

    def _read(self, piece: _Piece, resp: Response, k: int) -> None:
        while piece.start + piece.got < piece.end:
            if self.error is not None:
                raise Aborted()
            if any(lease.lost.is_set() for lease in self.leases):
                raise LeaseLost()
            want = min(CHUNK, piece.end - piece.start - piece.got)
            raw = self._buffer()
            buf = memoryview(raw)[:want]
            n = 0
            while n < want:  # in sub-reads, so that the ramp sees bytes as they come
                got = resp.readinto(buf[n : n + SUBREAD])
                if not got:
                    break
                n += got
                self._received[k] += got
                self._flowing[k] = True
            if n:
                os.pwrite(self.fd, buf[:n], piece.start + piece.got)
                with self.cond:
                    piece.chunks.append((raw, n))
                    piece.got += n
                    self._unsynced += n
                    self.cond.notify_all()
                if self.tracker is not None:
                    self.tracker.advance(n)
                if self._unsynced >= SYNC_EVERY:
                    self._sync_wanted.set()
            if n < want:
                raise ShortBodyError(self.origin.label, piece.start + piece.got)

    # hasher and flusher ---------------------------------------------------------------------------
    def _hasher(self) -> None:
        try:
            for i, piece in enumerate(self.pieces):
                if i in self.done_before:
                    pos = piece.start
                    while pos < piece.end:  # on disk from an earlier pull: hashed once, here
                        data = os.pread(self.fd, min(CHUNK, piece.end - pos), pos)
                        if not data:
                            raise OriginChangedError(f"the part file is shorter than its record at byte {pos}")
                        self.digests.update(data)
                        pos += len(data)
                else:
                    k = 0
                    while True:
                        with self.cond:
                            while k >= len(piece.chunks) and not piece.done:
                                if self.error is not None:
                                    return
                                self.cond.wait(0.5)
                            if k >= len(piece.chunks):
                                break
                            raw, n = piece.chunks[k]
                        with memoryview(raw) as view:
                            self.digests.update(view[:n])
                        with self.cond:
                            piece.chunks[k] = (b"", 0)
                            self._free.append(raw)  # hashed: the buffer takes the next chunk
                        k += 1
                with self.cond:
                    self.frontier = i + 1
                    self.cond.notify_all()
        except BaseException as e:
            self._fail(e)

    # connections ----------------------------------------------------------------------------------
    def _open(self, threads: list[threading.Thread], first: int, last: int) -> None:
        for k in range(first, last):
            self._flowing[k] = False
            t = threading.Thread(target=self._worker, args=(k,), name=f"starverse-get-{k}", daemon=True)
            threads.append(t)
            t.start()

    def _busy(self) -> bool:
        with self.cond:
            return self.error is None and bool(self.todo)

    def _measure(self, k: int, *, settle: bool) -> tuple[float, float] | None:
        """Bytes/s of the host and of this file, once workers ``0..k-1`` have their first bytes; None: done.

        ``settle``: wait as long again as the first bytes took, for new connections to leave TCP
        slow start on a distant origin (what the rate with all connections needs, or they look
        useless). The first measurement, on the first connections only, does not wait so: a rate
        measured low there only makes the extra connections look better, and every moment spent
        on 2 of N connections is lost where the origin limits each (aria2c opens all N at once).
        """
        started = time.monotonic()
        while not self._meter.flowing():  # latency is not rate
            if not self._busy() or time.monotonic() > started + TIMEOUT:
                return None
            time.sleep(0.002)
        t0, b0, own0 = time.monotonic(), self._meter.total(), sum(self._received)
        wait = max(RAMP_INTERVAL, min(1.0, 2 * (t0 - started))) if settle else RAMP_INTERVAL
        reads = 8 if settle else 4  # sub-reads per connection (the counts move in SUBREAD steps)
        while self._busy():
            self._stop.wait(0.01)
            elapsed = time.monotonic() - t0
            own = sum(self._received) - own0
            if elapsed >= wait and (own >= reads * SUBREAD * k or elapsed >= 1.0):
                return (self._meter.total() - b0) / elapsed, own / elapsed
        return None

    def _ramp(self, threads: list[threading.Thread]) -> None:
        """From RAMP_FIRST connections to all; back again when all add too little to the host's rate."""
        while not self._meter.stepping.acquire(timeout=0.05):  # files of a pull step one at a time
            if not self._busy():
                return
        try:
            verdict = self._meter.fresh_verdict()
            if verdict is not None:  # another file of this host just measured it
                if verdict:
                    with self.cond:
                        k, self.limit = self.limit, self.connections
                        self.cond.notify_all()
                    self._open(threads, k, self.connections)
                return
            first = self._measure(self.limit, settle=False)
            if first is None:
                return
            self.ramp.append((self.limit, first[1] / 1e6))
            k = self.limit
            with self.cond:
                self.limit = self.connections
                self.cond.notify_all()
            self._open(threads, k, self.connections)
            after = self._measure(self.connections, settle=True)
            if after is None:
                return
            self.ramp.append((self.connections, after[1] / 1e6))
            helped = after[0] - first[0] >= (RAMP_GAIN - 1) * first[1]
            self._meter.verdict = (time.monotonic(), helped)
            if not helped:
                with self.cond:
                    self.limit = k  # the extra workers stop after their current piece
                log.debug(
                    "%s: %d connections add nothing over %d (%s)", self.origin.label, self.connections, k, self.ramp
                )
        finally:
            self._meter.stepping.release()

    def _flusher(self) -> None:
        synced: set[int] = set()
        while not self._stop.is_set():
            wanted = self._sync_wanted.wait(SYNC_SECONDS)
            if self._stop.is_set():
                return  # the file is complete (synced by the caller) or failed (synced by run)
            with self.cond:
                news = len(self.completed) > len(synced)
            if wanted or news:
                self._sync_wanted.clear()
                synced = self._sync()

    def _sync(self) -> set[int]:
        with self.cond:
            done = set(self.completed)
            self._unsynced = 0
        _datasync(self.fd)
        record = {"size": self.size, "etag": self.etag, "piece": PIECE, "done": sorted(done | self.done_before)}
        with contextlib.suppress(OSError):
            _write_sidecar(self.sidecar, record)
        return done

    def run(self) -> None:
        if not self.done_before:
            with contextlib.suppress(OSError):
                _write_sidecar(self.sidecar, {"size": self.size, "etag": self.etag, "piece": PIECE, "done": []})
        threads = [threading.Thread(target=self._hasher, name="starverse-hash", daemon=True)]
        flusher = threading.Thread(target=self._flusher, name="starverse-flush", daemon=True)
        flusher.start()
        threads[0].start()
        try:
            self._open(threads, 0, self.limit)
            if self.limit < self.connections:
                self._ramp(threads)
            for t in threads:  # the list only grows in this thread
                t.join()
        finally:
            self._meter.release(self._received)
            self._stop.set()
            self._sync_wanted.set()
            flusher.join()
            if self.first is not None:
                self.first[1].close()
        if self.error is not None:
            self._sync()  # keep what arrived for the next pull
            raise self.error


def share_connections(connections: int, files: int) -> tuple[int, int]:
    """``(files at once, connections per file)`` for ``files`` large files.

    Up to :data:`FILES_AT_ONCE` files at once, each with ``connections`` (as ``aria2c -x N``
    with ``-j``): files one after the other leave connections idle while each file's last
    pieces arrive and hash on one core. Each file's ramp keeps its extra connections only
    while they add to the host's rate, so a fast origin ends with 2 per file.
    """
    return max(1, min(files, FILES_AT_ONCE)), connections


def download(
    origin: Origin,
    dest: Path,
    target: Target,
    *,
    connections: int = 8,
    tracker: ProgressTracker | None = None,
    leases: Sequence[Lease] = (),
    sync: bool = True,
) -> Downloaded:
    """Fetch ``origin`` into ``dest``'s part file, verify it and leave it there (fsync'ed).

    ``sync=False`` skips the fsync of a file that comes in one stream: for callers that sync
    the whole file system once after a batch of small files (:func:`sync_filesystem`).

    The caller renames the part file (``part_paths(dest)[0]``) into place after its own
    checks. Raises :class:`TransferError` subclasses; an interrupted download keeps its part
    file and sidecar for the next call.
    """
    part, sidecar = part_paths(dest)
    make_dirs(dest.parent)
    restarted = False
    while True:
        try:
            return _download_once(origin, part, sidecar, target, connections, tracker, leases, sync)
        except OriginChangedError as e:
            part.unlink(missing_ok=True)
            sidecar.unlink(missing_ok=True)
            if restarted:
                raise
            restarted = True
            log.warning("%s: %s; starting this file again from zero", target.name, e)
            if tracker is not None:
                tracker.note(f"{target.name}: the origin changed ({e}); restarted the file")


def _download_once(
    origin: Origin,
    part: Path,
    sidecar: Path,
    target: Target,
    connections: int,
    tracker: ProgressTracker | None,
    leases: Sequence[Lease],
    sync: bool = True,
) -> Downloaded:
    state = _read_sidecar(sidecar) if part.exists() else None
    if state is not None and (state["piece"] != PIECE or (target.size is not None and state["size"] != target.size)):
        state = None
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(part, flags, 0o644)
    try:
        if state is None:
            os.ftruncate(fd, 0)
            sidecar.unlink(missing_ok=True)
        digests = _Digests(target)
        done_before: set[int] = set(state["done"]) if state is not None else set()
        size = target.size
        if size is not None and size >= SPLIT_AT:
            start = next((i * PIECE for i in range(-(-size // PIECE)) if i not in done_before), size)
            resp = _open_first(origin, start, min(size, start + PIECE) if start < size else None)
            if resp is None or not resp.ranged:
                if resp is not None and resp.size is not None and resp.size != size:
                    resp.close()
                    raise OriginChangedError(f"the origin has {resp.size} bytes, the listing said {size}")
                os.ftruncate(fd, 0)
                sidecar.unlink(missing_ok=True)
                return _single(origin, fd, target, digests, tracker, leases, resp, True)  # no Range: one stream
            if resp.size is not None and resp.size != size:
                resp.close()
                raise OriginChangedError(f"the origin has {resp.size} bytes, the listing said {size}")
            etag = resp.etag
            if state is not None and state.get("etag") != etag:
                resp.close()
                raise OriginChangedError(f"ETag {state.get('etag')} -> {etag} since the last try")
            os.ftruncate(fd, size)
            resumed = sum(min(size, (i + 1) * PIECE) - i * PIECE for i in done_before if i * PIECE < size)
            if tracker is not None and resumed:
                tracker.advance(resumed)
            first = (start // PIECE, resp)
            args = (origin, fd, size, etag, done_before, sidecar, digests, connections, tracker, leases, first)
            _Ranged(*args).run()
            _datasync(fd)
            out = Downloaded(size, digests.sha.hexdigest(), etag, _hex(digests), resumed)
        else:
            out = _single(origin, fd, target, digests, tracker, leases, None, sync)
    finally:
        os.close(fd)
    _check(target, out)
    sidecar.unlink(missing_ok=True)
    return out


def _hex(digests: _Digests) -> dict[str, str]:
    return {k: h.hexdigest() for k, h in digests.extra.items()}


def _check(target: Target, out: Downloaded) -> None:
    if target.size is not None and out.size != target.size:
        raise OriginChangedError(f"read {out.size} bytes, the listing said {target.size}")
    if target.sha256 is not None and out.sha256 != target.sha256:
        raise ChecksumError(f"{target.name}: sha256 {out.sha256} does not match the listed {target.sha256}")


class ChecksumError(TransferError):
    """The bytes arrived but their digest is not the listed one."""


def _open_first(origin: Origin, start: int, end: int | None) -> Response | None:
    if end is None:
        return None  # nothing missing: every piece is on disk already
    tries = 0
    while True:
        try:
            return origin.stream(start, end)
        except RetryableError:
            tries += 1
            if tries > RETRIES:
                raise
            time.sleep(min(BACKOFF_MAX, BACKOFF * 2 ** (tries - 1)))


def _single(
    origin: Origin,
    fd: int,
    target: Target,
    digests: _Digests,
    tracker: ProgressTracker | None,
    leases: Sequence[Lease],
    resp: Response | None,
    sync: bool,
) -> Downloaded:
    """One stream from byte 0 (small files, unknown sizes, origins without Range); retried whole."""
    tries = 0
    short: int | None = None
    while True:
        done = 0
        try:
            if resp is None:
                resp = origin.stream(0, None)
            etag = resp.etag
            unsynced = 0
            buf = memoryview(bytearray(CHUNK))
            while True:
                if any(lease.lost.is_set() for lease in leases):
                    raise LeaseLost()
                n = resp.readinto(buf)
                if not n:
                    break
                os.pwrite(fd, buf[:n], done)
                digests.update(buf[:n])
                done += n
                unsynced += n
                if tracker is not None:
                    tracker.advance(n)
                if unsynced >= SYNC_EVERY:
                    _datasync(fd)
                    unsynced = 0
            os.ftruncate(fd, done)
            if resp.size is not None and not resp.ranged and done != resp.size:
                raise ShortBodyError(origin.label, done, resp.size)
            if sync:
                _datasync(fd)
            return Downloaded(done, digests.sha.hexdigest(), etag, _hex(digests))
        except RetryableError as e:
            short = _same_short(e, short)
            tries += 1
            if tries > RETRIES:
                raise
            if tracker is not None and done:
                tracker.advance(-done)
            digests.reset()
            time.sleep(min(BACKOFF_MAX, BACKOFF * 2 ** (tries - 1)))
        finally:
            if resp is not None:
                resp.close()
                resp = None


def fetch_small(origin: Origin, target: Target) -> tuple[memoryview, Downloaded]:
    """A small file whole into one buffer (one GET on this thread's kept-alive connection), hashed from it.

    For batches of small files (:mod:`._models`, :mod:`._localbatch`): nothing is written here, so
    the caller writes the buffer where its batch stages and syncs the batch once. Retried whole on
    5xx/429, resets and short bodies, as :func:`download`; the size and sha256 are checked against
    ``target`` (:class:`ChecksumError`, :class:`OriginChangedError`).
    """
    tries = 0
    short: int | None = None
    want = (target.size + 1) if target.size is not None else CHUNK  # +1: a longer body shows at once
    while True:
        resp: Response | None = None
        try:
            resp = origin.stream(0, None)
            buf = bytearray(want if resp.size is None else max(want, resp.size + 1))
            view = memoryview(buf)
            done = 0
            while True:
                if done == len(buf):
                    buf.extend(bytes(len(buf)))  # an unannounced size: grow
                    view = memoryview(buf)
                n = resp.readinto(view[done:])
                if not n:
                    break
                done += n
            if resp.size is not None and not resp.ranged and done != resp.size:
                raise ShortBodyError(origin.label, done, resp.size)
            data = view[:done]
            digests = _Digests(target)
            digests.update(data)
            out = Downloaded(done, digests.sha.hexdigest(), resp.etag, _hex(digests))
            _check(target, out)
            return data, out
        except RetryableError as e:
            short = _same_short(e, short)
            tries += 1
            if tries > RETRIES:
                raise
            time.sleep(min(BACKOFF_MAX, BACKOFF * 2 ** (tries - 1)))
        finally:
            if resp is not None:
                resp.close()


# -- local and network-mounted sources ---------------------------------------------------------------
_ZERO = bytes(CHUNK * 8)


def copy_local(
    src: str,
    dest: Path,
    target: Target,
    *,
    tracker: ProgressTracker | None = None,
    leases: Sequence[Lease] = (),
    sync: bool = True,
) -> Downloaded:
    """Copy a local or NFS file into ``dest``'s part file with ``copy_file_range`` (no user-space copy).

    Each block is read once to hash it (from the page cache the copy fills, or the NFS
    server's); all-zero blocks are left as holes. Falls back to ``pwrite`` where the kernel
    or file system cannot copy between the two files.
    """
    part, sidecar = part_paths(dest)
    make_dirs(dest.parent)
    sidecar.unlink(missing_ok=True)
    digests = _Digests(target)
    step = len(_ZERO)
    can_copy = hasattr(os, "copy_file_range")
    sfd = os.open(src, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        dfd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            pos = 0
            while True:
                if any(lease.lost.is_set() for lease in leases):
                    raise LeaseLost()
                data = os.pread(sfd, step, pos)
                if not data:
                    break
                n = len(data)
                digests.update(data)
                if not (data == _ZERO if n == step else data == bytes(n)):
                    copied = 0
                    if can_copy:
                        try:
                            copied = _copy_range(sfd, dfd, n, pos)
                        except OSError:
                            can_copy = False
                            copied = 0
                    if copied < n:
                        os.pwrite(dfd, memoryview(data)[copied:], pos + copied)
                pos += n
                if tracker is not None:
                    tracker.advance(n)
            os.ftruncate(dfd, pos)  # trailing holes
            if sync:
                _datasync(dfd)
        finally:
            os.close(dfd)
    finally:
        os.close(sfd)
    out = Downloaded(pos, digests.sha.hexdigest(), None, _hex(digests))
    _check(target, out)
    return out


def boot_id() -> str | None:
    """This boot of this host (Linux): page-cache contents written before a kill -9 survive within it."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f"{socket.gethostname()}/{f.read().strip()}"
    except OSError:
        return None


def sync_filesystem(path: Path) -> None:
    """Make everything written to ``path``'s file system durable (``syncfs``; ``sync`` where missing)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            if getattr(libc, "syncfs", None) is not None and libc.syncfs(fd) == 0:
                return
        except OSError:
            pass
        os.sync()
    finally:
        os.close(fd)


def _copy_range(sfd: int, dfd: int, n: int, pos: int) -> int:
    copied = 0
    while copied < n:
        got = os.copy_file_range(sfd, dfd, n - copied, pos + copied, pos + copied)
        if got == 0:
            break
        copied += got
    return copied
