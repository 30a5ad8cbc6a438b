"""Where the engine's bytes come from, and what can go wrong on the way.

The errors of a transfer (retryable or not), the ``Origin`` / ``Response`` protocols the engine
reads through, the HTTP origin with one kept-alive connection per thread and host (redirects,
``Range``, ETag) and the fsspec origin for ``s3://``, ``gs://`` and other remote file systems.
"""

from __future__ import annotations

import contextlib
import http.client
import threading
from typing import Any, Protocol
from urllib.parse import urljoin, urlsplit

from ._tuning import TIMEOUT


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


class ChecksumError(TransferError):
    """The bytes arrived but their digest is not the listed one."""
