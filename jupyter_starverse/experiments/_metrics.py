"""``metrics.jsonl`` and, for scripts that do not use the runtime, loss lines in the logs."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._layout import RunPaths

__all__ = ["MetricPoint", "Progress", "parse_log_metrics", "progress", "read_metrics"]

_LOSS_RE = re.compile(r"\bloss\b\s*[:=]?\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)", re.IGNORECASE)
_STEP_RE = re.compile(r"\b(?:step|iter(?:ation)?)\b\s*[:=]?\s*(\d+)", re.IGNORECASE)


@dataclass(frozen=True)
class MetricPoint:
    """Values logged at one step (``time`` is seconds since the epoch, or None from logs)."""

    step: int
    values: Mapping[str, float] = field(default_factory=dict)
    time: float | None = None
    rank: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "time": self.time, "rank": self.rank, "values": dict(self.values)}


def metric_point(data: Any) -> MetricPoint | None:
    if not isinstance(data, dict) or not isinstance(data.get("step"), int):
        return None
    values = {
        k: float(v)
        for k, v in data.items()
        if k not in ("step", "time", "rank") and isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    t = data.get("time")
    return MetricPoint(
        int(data["step"]), values, float(t) if isinstance(t, (int, float)) else None, int(data.get("rank", 0))
    )


def parse_log_metrics(text: str) -> list[MetricPoint]:
    """Loss values in free-form log lines (``step 10 loss 2.31``, ``loss=2.31``)."""
    out: list[MetricPoint] = []
    for line in text.splitlines():
        loss = _LOSS_RE.search(line)
        if not loss:
            continue
        try:
            value = float(loss.group(1))
        except ValueError:
            continue
        if not math.isfinite(value):
            continue
        step = _STEP_RE.search(line)
        out.append(MetricPoint(int(step.group(1)) if step else len(out), {"loss": value}))
    return out


def read_metrics(run_dir: Path | RunPaths, *, from_logs: bool = True) -> list[MetricPoint]:
    """Every metric point of a run, in file order.

    Reads ``metrics.jsonl`` (written by ``jupyter_starverse.runtime.log_metrics``). When it
    is missing or empty and ``from_logs`` is set, loss values are parsed from rank 0's log,
    so scripts that never import the runtime still get a loss curve. A partly written last
    line is skipped.
    """
    paths = run_dir if isinstance(run_dir, RunPaths) else RunPaths(Path(run_dir))
    points: list[MetricPoint] = []
    try:
        with paths.metrics.open() as f:
            for line in f:
                try:
                    p = metric_point(json.loads(line))
                except ValueError:
                    continue
                if p is not None:
                    points.append(p)
    except FileNotFoundError:
        pass
    if points or not from_logs:
        return points
    try:
        return parse_log_metrics(paths.rank_log(0).read_text(errors="replace"))
    except FileNotFoundError:
        return []


@dataclass(frozen=True)
class Progress:
    """Where a run stands: last step, total, speed, ETA and latest values."""

    step: int | None
    total: int | None
    steps_per_s: float | None
    eta_s: float | None
    values: Mapping[str, float] = field(default_factory=dict)

    @property
    def fraction(self) -> float | None:
        if self.step is None or not self.total:
            return None
        return min(1.0, (self.step + 1) / self.total)

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "total": self.total,
            "steps_per_s": self.steps_per_s,
            "eta_s": self.eta_s,
            "fraction": self.fraction,
            "values": dict(self.values),
        }


def progress(points: list[MetricPoint], *, total: int | None, window: int = 20) -> Progress:
    """Speed over the last ``window`` timed points, and the ETA to ``total`` steps."""
    if not points:
        return Progress(None, total, None, None)
    last = points[-1]
    timed = [p for p in points[-window:] if p.time is not None]
    rate: float | None = None
    if len(timed) >= 2:
        first, end = timed[0], timed[-1]
        dt = (end.time or 0.0) - (first.time or 0.0)
        if dt > 0 and end.step > first.step:
            rate = (end.step - first.step) / dt
    eta = (total - 1 - last.step) / rate if rate and total else None
    return Progress(last.step, total, rate, max(0.0, eta) if eta is not None else None, dict(last.values))
