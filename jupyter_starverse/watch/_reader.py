"""Cheap re-reads of a run folder for a monitor that polls every second.

``metrics.jsonl`` is read incrementally (only the bytes appended since the last poll) and
logs are read from their end, so a poll costs the same after 50 000 steps as after 50.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path

from jupyter_starverse.experiments import MetricPoint, RunPaths, metric_point, read_metrics
from jupyter_starverse.jobmodel import Job, LogLine

from ._progress import RankRecord

__all__ = ["MetricsFollower", "last_lines", "tail_run_logs"]

_CHUNK = 64 * 1024


class MetricsFollower:
    """Metric records of one run, re-reading only what was appended since the last call.

    Safe to share between threads (the server keeps one per job across requests).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._path: Path | None = None
        self._offset = 0
        self._partial = b""
        self._points: list[MetricPoint] = []

    def _reset(self, path: Path | None) -> None:
        self._path, self._offset, self._partial, self._points = path, 0, b"", []

    def read(self, job: Job) -> list[MetricPoint]:
        """Every record so far (``read_metrics`` semantics, including the log fallback)."""
        with self._lock:
            return self._read(job)

    def _read(self, job: Job) -> list[MetricPoint]:
        run = RunPaths(Path(job.experiment_dir))
        path = run.metrics
        if path != self._path:
            self._reset(path)
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            self._reset(path)
            return read_metrics(run)  # no runtime metrics: loss parsed from the log
        if size < self._offset:  # replaced or truncated: start over
            self._reset(path)
        if size > self._offset:
            with path.open("rb") as f:
                f.seek(self._offset)
                data = f.read(size - self._offset)
            self._offset += len(data)
            lines = (self._partial + data).split(b"\n")
            self._partial = lines.pop()  # a line still being written
            for line in lines:
                try:
                    point = metric_point(json.loads(line))
                except (ValueError, RecursionError):  # a foreign or broken line, never a failed poll
                    continue
                if point is not None:
                    self._points.append(point)
        if not self._points:
            return read_metrics(run)
        return list(self._points)


def last_lines(path: Path, count: int) -> list[str]:
    """The last ``count`` complete or final lines of a text file ([] if it does not exist)."""
    if count <= 0:
        return []
    try:
        with path.open("rb") as f:
            size = f.seek(0, os.SEEK_END)
            chunk = _CHUNK
            while True:
                start = max(0, size - chunk)
                f.seek(start)
                data = f.read(size - start)
                lines = data.split(b"\n")
                if start > 0:
                    lines = lines[1:]  # the first piece is the end of an earlier line
                if lines and lines[-1] == b"":
                    lines.pop()
                if len(lines) >= count or start == 0:
                    return [ln.decode(errors="replace").rstrip("\r") for ln in lines[-count:]]
                chunk *= 4
    except FileNotFoundError:
        return []


def tail_run_logs(
    job: Job, ranks: Sequence[RankRecord], *, lines: int, rank: int | None = None
) -> list[LogLine] | None:
    """The tail of a run's log files read from their ends; None when the run has no log folder.

    ``lines`` are shared among the ranks (at least 3 each), then the last 2 lines of each
    node agent's log follow (only when ``rank`` is None).
    """
    run = RunPaths(Path(job.experiment_dir))
    if not run.logs.is_dir():
        return None
    spec = job.spec
    node_of = {r.rank: r.node for r in ranks}
    wanted = [rank] if rank is not None else list(range(spec.world_size))
    share = max(3, lines // max(1, len(wanted)))
    out: list[LogLine] = []
    for r in wanted:
        node = node_of.get(r, r // spec.procs_per_node)
        out.extend(LogLine(node, r, text) for text in last_lines(run.rank_log(r), share))
    if rank is None:
        for node in range(spec.nodes):
            out.extend(LogLine(node, None, text) for text in last_lines(run.node_log(node), 2))
    return out
