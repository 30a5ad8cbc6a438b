"""One large file over several connections: pieces, the connection ramp, in-order hashing.

:class:`_Ranged` fetches a file's :data:`._tuning.PIECE`-sized ranges over up to N
connections, writes them in place, hashes them in file order on one thread, syncs the part
file while data arrives and records completed pieces in the sidecar (:mod:`._journal`). The
ramp starts on two connections and keeps the rest only while they add to the host's rate,
measured over every file fetched from that host at once (:class:`_Meter`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from . import _tuning
from ._journal import _Digests, _Piece, _write_sidecar
from ._lease import Lease
from ._origins import (
    Aborted,
    LeaseLost,
    Origin,
    OriginChangedError,
    Response,
    RetryableError,
    ShortBodyError,
    _same_short,
)
from ._progress import ProgressTracker

log = logging.getLogger(f"{__package__}._download")  # the engine's one logger, as before the split


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
        if self.verdict is None or time.monotonic() - self.verdict[0] > _tuning.VERDICT_SECONDS:
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
        self.pieces = [_Piece(s, min(size, s + _tuning.PIECE)) for s in range(0, size, _tuning.PIECE)]
        self.done_before = {i for i in done_before if i < len(self.pieces)}
        self.todo = [i for i in range(len(self.pieces)) if i not in self.done_before]
        self.connections = max(1, min(connections, len(self.todo) or 1))
        self.window = 2 * self.connections + 2
        self.limit = min(_tuning.RAMP_FIRST, self.connections)  # workers allowed to take pieces now
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
        return bytearray(_tuning.CHUNK)

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
                if tries > _tuning.RETRIES:
                    raise
                delay = min(_tuning.BACKOFF_MAX, _tuning.BACKOFF * 2 ** (tries - 1))
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
            want = min(_tuning.CHUNK, piece.end - piece.start - piece.got)
            raw = self._buffer()
            buf = memoryview(raw)[:want]
            n = 0
            while n < want:  # in sub-reads, so that the ramp sees bytes as they come
                got = resp.readinto(buf[n : n + _tuning.SUBREAD])
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
                if self._unsynced >= _tuning.SYNC_EVERY:
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
                        data = os.pread(self.fd, min(_tuning.CHUNK, piece.end - pos), pos)
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
            if not self._busy() or time.monotonic() > started + _tuning.TIMEOUT:
                return None
            time.sleep(0.002)
        t0, b0, own0 = time.monotonic(), self._meter.total(), sum(self._received)
        wait = max(_tuning.RAMP_INTERVAL, min(1.0, 2 * (t0 - started))) if settle else _tuning.RAMP_INTERVAL
        reads = 8 if settle else 4  # sub-reads per connection (the counts move in SUBREAD steps)
        while self._busy():
            self._stop.wait(0.01)
            elapsed = time.monotonic() - t0
            own = sum(self._received) - own0
            if elapsed >= wait and (own >= reads * _tuning.SUBREAD * k or elapsed >= 1.0):
                return (self._meter.total() - b0) / elapsed, own / elapsed
        return None

    def _ramp(self, threads: list[threading.Thread]) -> None:
        """From RAMP_FIRST connections to all; back again when they add too little to the host's rate."""
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
            helped = after[0] - first[0] >= (_tuning.RAMP_GAIN - 1) * first[1]
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
            wanted = self._sync_wanted.wait(_tuning.SYNC_SECONDS)
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
        _tuning._datasync(self.fd)
        record = {"size": self.size, "etag": self.etag, "piece": _tuning.PIECE, "done": sorted(done | self.done_before)}
        with contextlib.suppress(OSError):
            _write_sidecar(self.sidecar, record)
        return done

    def run(self) -> None:
        if not self.done_before:
            with contextlib.suppress(OSError):
                _write_sidecar(self.sidecar, {"size": self.size, "etag": self.etag, "piece": _tuning.PIECE, "done": []})
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
