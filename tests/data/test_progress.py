"""The progress a step reports: documents and bytes per pass, a fraction that never passes 100%, an ETA."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from jupyter_starverse.data import Doc, StepProgress
from jupyter_starverse.data._progress import ProgressMeter


def _docs(n: int) -> list[Doc]:
    return [Doc(i, "a.jsonl", i + 1, "文本" * 5) for i in range(n)]


def test_two_passes_count_documents_bytes_and_never_pass_100_percent_on_a_low_estimate() -> None:
    seen: list[StepProgress] = []
    meter = ProgressMeter("dedup", seen.append, passes=2, every=0.0)
    meter.phase("estimating")
    meter.expect(60, 5000)  # the estimate says 60; the corpus has 128
    assert list(meter.read(iter(_docs(128)))) == _docs(128)
    first = [p for p in seen if p.phase == "reading" and p.pass_no == 1]
    assert first[-1].docs_done == 128 and first[-1].docs_total == 128 and first[-1].total_exact
    assert all(p.fraction is not None and p.fraction <= 0.5 for p in first)  # one pass of two
    list(meter.read(iter(_docs(128))))
    meter.phase("done")
    reading = [p for p in seen if p.phase == "reading"]
    fractions = [p.fraction or 0.0 for p in reading]
    assert fractions == sorted(fractions) and max(fractions) <= 0.99
    assert reading[-1].bytes_done == 2 * 128 * len("文本".encode() * 5)  # UTF-8 bytes, both passes
    assert all(p.eta_s is not None and p.eta_s >= 0 for p in reading if p.fraction and p.docs_done)
    assert seen[-1].phase == "done" and seen[-1].fraction == 1.0 and seen[-1].eta_s == 0.0
    mid = next(p for p in reading if p.pass_no == 2 and p.docs_done == 64)  # a look every 64 documents
    assert str(mid).startswith("dedup pass 2/2 [###############.....]  75% 64/128 documents")
    assert "ETA" in str(mid)


def test_progress_is_throttled() -> None:
    seen: list[StepProgress] = []
    meter = ProgressMeter("scan", seen.append, every=3600.0)
    meter.expect(10_000, 1 << 20)
    list(meter.read(iter(_docs(10_000))))
    assert len(seen) == 2  # the pass's start and end, nothing in between


def test_the_eta_is_the_current_pass_rate_not_the_first_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pass 1 read 1,000 documents a second, pass 2 embeds 10 a second: its ETA says so."""
    from jupyter_starverse.data import _progress

    clock = [0.0]
    monkeypatch.setattr(_progress.time, "monotonic", lambda: clock[0])
    seen: list[StepProgress] = []
    meter = ProgressMeter("dedup", seen.append, passes=2, every=0.0)
    meter.expect(1000, 1 << 20)

    def timed(n: int, per_doc: float) -> Iterator[Doc]:
        for d in _docs(n):
            clock[0] += per_doc
            yield d

    list(meter.read(timed(1000, 0.001)))
    start = len(seen)
    list(meter.read(timed(128, 0.1)))
    second = [p for p in seen[start:] if p.phase == "reading"]
    assert second[0].docs_done == 0 and second[0].eta_s is None  # nothing read in this pass: no claim
    mid = next(p for p in second if p.docs_done == 64)
    assert mid.eta_s is not None and abs(mid.eta_s - (1000 - 64) * 0.1) < 1.0  # ~94 s, not ~1 s
    assert "ETA 1m" in str(mid)
