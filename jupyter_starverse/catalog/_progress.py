"""Pull progress: rate and ETA, callbacks, and a copy persisted on the store.

The copy on the store (``progress/<key>.json``) is what lets the server, the side panel
and waiting processes show a pull that another process or node is doing.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._perms import file_mode, make_dirs
from ._types import PullProgress

__all__ = ["ProgressCallback", "ProgressTracker", "read_progress", "tqdm_callback", "write_json_atomic"]

ProgressCallback = Callable[[PullProgress], None]
log = logging.getLogger(__name__)


def write_json_atomic(path: Path, data: Any, *, durable: bool = True, mode: int | None = None) -> None:
    """Write JSON to ``path`` via a temp file and rename (readers never see half a file).

    The file gets ``mode`` (default: ``0644``, ``0640`` in a group-shared store) whatever the
    umask. The temp file is created ``O_EXCL`` with a random name (``mkstemp``), so a link
    planted in the folder is never written through. ``durable=False`` skips the fsync: for
    progress, which is worthless after a crash.
    """
    make_dirs(path.parent)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(name)
    try:
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), file_mode(path.parent) if mode is None else mode)
            f.write(json.dumps(data))  # one string: json.dump writes many small pieces
            if durable:
                f.flush()
                os.fsync(f.fileno())
        tmp.replace(path)
    except OSError as e:
        if e.filename is None:  # a failed write names no file: name it (a full disk says where)
            raise OSError(e.errno, e.strerror, str(path)) from e
        raise
    finally:
        tmp.unlink(missing_ok=True)


def read_progress(path: Path) -> PullProgress | None:
    """The persisted progress at ``path`` or None."""
    try:
        return PullProgress.from_json(json.loads(path.read_text()))
    except (FileNotFoundError, ValueError, TypeError, KeyError):
        return None


class ProgressTracker:
    """Counts bytes and files for one pull; thread safe.

    Parameters
    ----------
    ref
        Entry ref shown to the user.
    path
        Where to persist progress on the store.
    callback
        Called with a :class:`PullProgress` at most every ``interval`` seconds and at the end.
    """

    def __init__(self, ref: str, path: Path, callback: ProgressCallback | None, *, interval: float = 0.25) -> None:
        self.ref = ref
        self.path = path
        self.callback = callback
        self.interval = interval
        self.bytes_total: int | None = None
        self.files_total: int | None = None
        self.bytes_done = 0
        self.files_done = 0
        self.phase = "waiting"
        self.owner = False
        self._lock = threading.Lock()
        self._start = time.monotonic()
        self._last_emit = 0.0
        self._last_persist = 0.0
        self._samples: list[tuple[float, int]] = []
        self.notes: list[str] = []

    def note(self, text: str) -> None:
        """Something the user should know that is not an error (an origin changed, a file restarted)."""
        with self._lock:
            self.notes.append(text)
        log.warning("%s: %s", self.ref, text)

    def start(self, *, bytes_total: int | None, files_total: int | None, already: int = 0) -> None:
        """Become the owner of the download with the given totals (``already`` bytes present)."""
        with self._lock:
            self.owner = True
            self.phase = "downloading"
            self.bytes_total, self.files_total = bytes_total, files_total
            self.bytes_done = already
            self._start = time.monotonic()
            self._samples = [(self._start, already)]
        self.emit(force=True)

    def advance(self, n: int) -> None:
        with self._lock:
            self.bytes_done += n
        self.emit()

    def set_done_bytes(self, n: int) -> None:
        with self._lock:
            self.bytes_done = n
        self.emit()

    def file_done(self) -> None:
        with self._lock:
            self.files_done += 1
        self.emit()

    def add_files(self, files: int, nbytes: int) -> None:
        """``files`` more files complete, ``nbytes`` more bytes (a batch reports in groups)."""
        with self._lock:
            self.files_done += files
            self.bytes_done += nbytes
        self.emit()

    def set_phase(self, phase: str, *, error: str | None = None) -> None:
        self.phase = phase
        self.emit(force=True, error=error)

    def _rate(self, now: float) -> float:
        self._samples.append((now, self.bytes_done))
        # Rate over the last ~5 s so it follows changes without jumping around.
        while len(self._samples) > 2 and now - self._samples[0][0] > 5.0:
            self._samples.pop(0)
        t0, b0 = self._samples[0]
        return (self.bytes_done - b0) / (now - t0) if now > t0 else 0.0

    def snapshot(self, *, error: str | None = None) -> PullProgress:
        with self._lock:
            now = time.monotonic()
            rate = self._rate(now)
            eta = None
            if self.bytes_total is not None and rate > 0:
                eta = max(0.0, (self.bytes_total - self.bytes_done) / rate)
            return PullProgress(
                ref=self.ref,
                phase=self.phase,
                bytes_done=self.bytes_done,
                bytes_total=self.bytes_total,
                files_done=self.files_done,
                files_total=self.files_total,
                rate=rate,
                eta_s=0.0 if self.phase == "done" else eta,
                owner=self.owner,
                updated_at=time.time(),
                error=error,
            )

    def emit(self, *, force: bool = False, error: str | None = None) -> None:
        now = time.monotonic()
        if not force and now - self._last_emit < self.interval:
            return
        self._last_emit = now
        snap = self.snapshot(error=error)
        if self.owner and (force or now - self._last_persist >= 1.0):
            self._last_persist = now
            with contextlib.suppress(OSError):
                write_json_atomic(self.path, snap.to_json(), durable=False)
        if self.callback is not None:
            self.callback(snap)

    def relay(self, other: PullProgress | None) -> None:
        """While waiting, show the owner's persisted progress as ours."""
        if self.callback is None:
            return
        now = time.monotonic()
        if now - self._last_emit < self.interval:
            return
        self._last_emit = now
        if other is None:
            self.callback(self.snapshot())
        else:
            self.callback(
                PullProgress(
                    ref=self.ref,
                    phase="waiting",
                    bytes_done=other.bytes_done,
                    bytes_total=other.bytes_total,
                    files_done=other.files_done,
                    files_total=other.files_total,
                    rate=other.rate,
                    eta_s=other.eta_s,
                    owner=False,
                    updated_at=other.updated_at,
                )
            )


def tqdm_callback(*, desc: str | None = None) -> tuple[ProgressCallback, Callable[[], None]]:
    """A progress callback drawing a tqdm bar (bytes, rate, ETA) and a function to close it."""
    from tqdm.auto import tqdm

    bar: Any = None

    def update(p: PullProgress) -> None:
        nonlocal bar
        if bar is None:
            bar = tqdm(total=p.bytes_total, unit="B", unit_scale=True, unit_divisor=1024, desc=desc or p.ref)
        if p.bytes_total is not None and bar.total != p.bytes_total:
            bar.total = p.bytes_total
        bar.n = p.bytes_done
        bar.set_postfix_str(p.phase if p.owner else "waiting for another pull", refresh=False)
        bar.refresh()

    def close() -> None:
        if bar is not None:
            bar.close()

    return update, close
