"""What each rank's worker recorded about itself, read from the run folder."""

from __future__ import annotations

import json
import os
from pathlib import Path

from jupyter_starverse.experiments import MetricPoint, RunPaths, metric_point, read_metrics, read_record, trusted_record
from jupyter_starverse.jobmodel import Job

from ._progress import RankRecord
from ._reader import last_lines

__all__ = ["MAX_RANK_FILES", "first_rank_error", "read_job_metrics", "read_rank_points", "read_rank_records"]

#: Ranks whose own records a poll reads (the monitor shows them one per row).
MAX_RANK_FILES = 256


def read_job_metrics(job: Job) -> list[MetricPoint]:
    """The metric records of ``job`` from its run folder (empty before the first step)."""
    return read_metrics(Path(job.experiment_dir))


def _int(value: object, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _owner(run: RunPaths) -> int | None:
    """The uid of the run folder: only what it (or root) wrote is the job's record (``trusted_record``)."""
    try:
        return os.lstat(run.root).st_uid
    except OSError:
        return None


def read_rank_records(job: Job) -> list[RankRecord]:
    """Pid, node, restart count and last error of each rank, as its worker recorded them.

    A record another uid planted in a group-shared run folder is not the job's: it is left out
    (the same trusted reader the local backend uses)."""
    run = RunPaths(Path(job.experiment_dir))
    owner = _owner(run)
    if owner is None:
        return []
    out = []
    for rank in range(job.spec.world_size):
        info = read_record(run.pids / f"rank{rank}.json", owner=owner)
        err = read_record(run.errors / f"rank{rank}.json", owner=owner)
        if not isinstance(info, dict) and not isinstance(err, dict):
            continue
        base = info if isinstance(info, dict) else err
        out.append(
            RankRecord(
                rank=rank,
                node=_int(base.get("node"), rank // job.spec.procs_per_node),
                local_rank=_int(base.get("local_rank"), rank % job.spec.procs_per_node),
                pid=_int(base.get("pid")) or None,
                attempt=_int(base.get("attempt")),
                error=str(err.get("error")) if isinstance(err, dict) else None,
                error_attempt=_int(err.get("attempt")) if isinstance(err, dict) else None,
            )
        )
    return out


def first_rank_error(run: RunPaths) -> str | None:
    """The earliest error any rank recorded, as ``rank R (node N): Error: message``."""
    first: dict[str, object] | None = None
    owner = _owner(run)
    if owner is not None and run.errors.is_dir():
        for f in run.errors.glob("rank*.json"):
            data = read_record(f, owner=owner)
            if isinstance(data, dict) and (first is None or _time(data) < _time(first)):
                first = data
    if first is None:
        return None
    return f"rank {first.get('rank')} (node {first.get('node')}): {first.get('error')}"


def _time(record: dict[str, object]) -> float:
    value = record.get("time", 0)
    return float(value) if isinstance(value, (int, float)) else 0.0


def read_rank_points(job: Job, *, last: int = 2) -> dict[int, list[MetricPoint]]:
    """The last records each rank kept of itself (``ranks/rankN.jsonl``), read from the files' ends."""
    run = RunPaths(Path(job.experiment_dir))
    folder = run.root / "ranks"
    owner = _owner(run)
    if owner is None or not folder.is_dir():
        return {}
    out: dict[int, list[MetricPoint]] = {}
    for rank in range(1, min(job.spec.world_size, MAX_RANK_FILES)):
        path = folder / f"rank{rank}.jsonl"
        if not path.exists() or not trusted_record(path, owner=owner):
            continue  # missing, or another uid's file: not this rank's record
        points = []
        for line in last_lines(path, last):
            try:
                point = metric_point(json.loads(line))
            except ValueError:
                continue
            if point is not None:
                points.append(point)
        if points:
            out[rank] = points
    return out
