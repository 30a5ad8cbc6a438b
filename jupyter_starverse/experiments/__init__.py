"""Experiment folders: one per experiment, one run folder per job, and readers for them."""

from __future__ import annotations

from ._checkpoints import (
    CHECKPOINT_INDEX,
    Checkpoint,
    CheckpointScan,
    IgnoredCheckpoint,
    ResumePlan,
    checkpoint_name,
    latest_checkpoint,
    list_checkpoints,
    open_trusted_checkpoint,
    plan_resume,
    record_checkpoint,
    scan_checkpoints,
    verify_checkpoint,
)
from ._index import JobIndex, JobPage, JobSummary, page_etag
from ._layout import ExperimentPaths, RunPaths, find_run, list_runs, new_job_id, read_json, write_json
from ._metrics import MetricPoint, Progress, metric_point, parse_log_metrics, progress, read_metrics
from ._status import NodeInterval, NodeRecord, RunEvent, RunStatus, node_intervals, read_status, write_status

__all__ = [
    "CHECKPOINT_INDEX",
    "Checkpoint",
    "CheckpointScan",
    "ExperimentPaths",
    "IgnoredCheckpoint",
    "JobIndex",
    "JobPage",
    "JobSummary",
    "MetricPoint",
    "NodeInterval",
    "NodeRecord",
    "Progress",
    "ResumePlan",
    "RunEvent",
    "RunPaths",
    "RunStatus",
    "checkpoint_name",
    "find_run",
    "latest_checkpoint",
    "list_checkpoints",
    "list_runs",
    "metric_point",
    "new_job_id",
    "node_intervals",
    "open_trusted_checkpoint",
    "page_etag",
    "parse_log_metrics",
    "plan_resume",
    "progress",
    "read_json",
    "read_metrics",
    "read_status",
    "record_checkpoint",
    "scan_checkpoints",
    "verify_checkpoint",
    "write_json",
    "write_status",
]
