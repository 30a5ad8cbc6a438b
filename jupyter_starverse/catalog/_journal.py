"""What one file of a pull is, and the record that lets it resume and be verified.

:class:`Target` (the name, size and digest the listing promised), :class:`Downloaded` (what
arrived), the part file and its sidecar of completed pieces (``.NAME.ranges``, written
atomically after a sync: what a pull killed with ``kill -9`` continues from), the digests fed
in file order, and the final check of size and sha256 against the listing.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import _tuning
from ._origins import ChecksumError, OriginChangedError


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
            _tuning._datasync(fd)
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


def _hex(digests: _Digests) -> dict[str, str]:
    return {k: h.hexdigest() for k, h in digests.extra.items()}


def _check(target: Target, out: Downloaded) -> None:
    if target.size is not None and out.size != target.size:
        raise OriginChangedError(f"read {out.size} bytes, the listing said {target.size}")
    if target.sha256 is not None and out.sha256 != target.sha256:
        raise ChecksumError(f"{target.name}: sha256 {out.sha256} does not match the listed {target.sha256}")
