"""The download engine's sizes, counts and times in one place.

Pieces, buffers, the ramp's steps, retries and time-outs that :mod:`._download`, :mod:`._ranged`
and :mod:`._origins` read. The engine's modules read them as ``_tuning.NAME`` when they run, so a
test that sets one here (``monkeypatch.setattr(_tuning, "PIECE", ...)``) changes it for all of them.
"""

from __future__ import annotations

import os
from collections.abc import Callable

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
