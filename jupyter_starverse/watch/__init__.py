"""Watching a job: progress, metrics follower, log tails, rank records, and :class:`JobWatch`.

Core logic with no display code: the notebook monitor, the REST jobs endpoint and the CLI
all read a job through these, so they show the same figures and the same progress line.
"""

from __future__ import annotations

from ._follow import follow_logs
from ._progress import JobProgress, RankRecord, RankView, format_duration, job_summary, startup_phase, summarize
from ._ranks import first_rank_error, read_job_metrics, read_rank_points, read_rank_records
from ._reader import MetricsFollower, last_lines, tail_run_logs
from ._watch import JobWatch, Meter

__all__ = [
    "JobProgress",
    "JobWatch",
    "Meter",
    "MetricsFollower",
    "RankRecord",
    "RankView",
    "first_rank_error",
    "follow_logs",
    "format_duration",
    "job_summary",
    "last_lines",
    "read_job_metrics",
    "read_rank_points",
    "read_rank_records",
    "startup_phase",
    "summarize",
    "tail_run_logs",
]
