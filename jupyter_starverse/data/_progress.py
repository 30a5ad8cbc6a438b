"""How far a running data step is: documents and bytes read, passes, and the time left.

A step reports :class:`StepProgress` through its ``progress`` callback (at most every
``every`` seconds, plus at each change of phase); the CLI draws it as a bar and the server
keeps the last one for ``GET data/steps/ID``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from typing import Any

from jupyter_starverse._format import format_bytes, format_count, format_duration

from ._read import Doc

__all__ = ["Progress", "ProgressMeter", "StepProgress"]

_BAR = 20


@dataclass(frozen=True)
class StepProgress:
    """A snapshot of a running step.

    ``docs_total`` is the estimate's count (``total_exact`` False) until a full pass has been
    read; ``fraction`` and ``eta_s`` count every pass the step makes over the corpus.
    """

    step: str
    phase: str  # estimating | reading | comparing (between passes: no fraction, no ETA) | publishing | done
    docs_done: int = 0  # documents read in the current pass
    docs_total: int | None = None
    total_exact: bool = False
    bytes_done: int = 0  # UTF-8 bytes of the texts read so far (every pass)
    bytes_total: int | None = None  # size of the source's files
    pass_no: int = 0
    passes: int = 1
    elapsed_s: float = 0.0
    fraction: float | None = None
    eta_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        if self.phase == "comparing":  # work between passes whose length nothing read so far tells
            return (
                f"{self.step}: comparing documents after pass {self.pass_no}/{self.passes} "
                f"({format_count(self.docs_done)} documents read), "
                f"ETA unknown ({format_duration(self.elapsed_s)} so far)"
            )
        if self.phase != "reading":
            return f"{self.step}: {self.phase} ({format_duration(self.elapsed_s)})"
        share = self.fraction or 0.0
        filled = round(share * _BAR)
        bar = "#" * filled + "." * (_BAR - filled)
        total = "" if self.docs_total is None else f"/{'' if self.total_exact else '~'}{format_count(self.docs_total)}"
        passes = f" pass {self.pass_no}/{self.passes}" if self.passes > 1 else ""
        return (
            f"{self.step}{passes} [{bar}] {share * 100:3.0f}% {format_count(self.docs_done)}{total} documents, "
            f"{format_bytes(self.bytes_done)} read, ETA {format_duration(self.eta_s)}"
        )


Progress = Callable[[StepProgress], None]


class ProgressMeter:
    """Counts what a step reads and calls ``progress`` with a :class:`StepProgress` now and then.

    The per-document cost is two additions and a clock read every 64 documents; the snapshot
    is built only when it is sent. The ETA is the current pass's reading rate (the estimate,
    the setup and earlier passes do not count) applied to what is left of every pass; a pass
    that has read nothing yet claims none.
    """

    def __init__(
        self,
        step: str,
        progress: Progress | None,
        *,
        passes: int = 1,
        docs_total: int | None = None,
        bytes_total: int | None = None,
        every: float = 0.5,
    ) -> None:
        self.state = StepProgress(step, "estimating", docs_total=docs_total, bytes_total=bytes_total, passes=passes)
        self._progress = progress
        self._every = every
        self._started = time.monotonic()
        self._reading_since: float | None = None
        self._pass_since: float | None = None
        self._last = 0.0
        self._in_pass = 0  # documents read in the current pass
        self._done_before = 0  # documents of the passes already finished
        self._bytes = 0

    def _emit(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < self._every:
            return
        self._last = now
        s = self.state
        total = s.docs_total
        if total is not None and not s.total_exact and self._in_pass > total:
            total = self._in_pass  # the estimate was low: never past 100%
        fraction = eta = None
        if total and s.phase == "reading":
            fraction = min(0.99, (self._done_before + self._in_pass) / (total * s.passes))
            if self._in_pass and self._pass_since is not None and now > self._pass_since:
                # this pass's own rate: a pass that embeds or compares as it reads is slower than
                # the one before it, and the rate of the first pass made "ETA 1m" of 15 hours
                rate = self._in_pass / (now - self._pass_since)
                left = max(0, total - self._in_pass) + total * max(0, s.passes - s.pass_no)
                eta = left / rate
        if s.phase == "done":
            fraction, eta = 1.0, 0.0
        self.state = s = replace(
            s,
            docs_done=self._in_pass if s.phase == "reading" else s.docs_done,
            docs_total=total,
            bytes_done=self._bytes,
            elapsed_s=now - self._started,
            fraction=fraction,
            eta_s=eta,
        )
        if self._progress is not None:
            self._progress(s)

    def phase(self, name: str) -> None:
        self.state = replace(self.state, phase=name)
        self._emit(force=True)

    def expect(self, docs: int, size: int) -> None:
        """The estimate's document count and the source's size, before the first pass."""
        self.state = replace(self.state, docs_total=docs or None, total_exact=False, bytes_total=size)

    def read(self, docs: Iterator[Doc]) -> Iterator[Doc]:
        """``docs`` counted: one pass of the step over the corpus."""
        s = self.state
        self._in_pass = 0
        self.state = replace(s, phase="reading", pass_no=min(s.pass_no + 1, s.passes))
        if self._reading_since is None:
            self._reading_since = time.monotonic()
        self._pass_since = time.monotonic()
        self._emit(force=True)
        every = self._every
        for doc in docs:
            self._in_pass += 1
            self._bytes += len(doc.text.encode())
            if not self._in_pass & 63 and time.monotonic() - self._last >= every:
                self._emit()
            yield doc
        self.state = replace(self.state, docs_total=self._in_pass, total_exact=True)  # now it is known
        self._emit(force=True)
        self._done_before += self._in_pass
        if self.state.pass_no < self.state.passes:
            # Until the next pass starts the step compares what it read (dedup: candidate pairs, as many
            # as the documents are alike): its length is unknown, so no fraction and no ETA are claimed.
            self.state = replace(self.state, phase="comparing")
            self._emit(force=True)
        self._in_pass = 0
