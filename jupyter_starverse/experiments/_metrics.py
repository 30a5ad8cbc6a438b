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

__all__ = ["MetricPoint", "Progress", "parse_log_metrics", "parse_megatron_line", "progress", "read_metrics"]

_LOSS_RE = re.compile(r"\bloss\b\s*[:=]?\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)", re.IGNORECASE)
_STEP_RE = re.compile(r"\b(?:step|iter(?:ation)?)\b\s*[:=]?\s*(\d+)", re.IGNORECASE | re.ASCII)


@dataclass(frozen=True)
class MetricPoint:
    """Values logged at one step (``time`` is seconds since the epoch, or None from logs)."""

    step: int
    values: Mapping[str, float] = field(default_factory=dict)
    time: float | None = None
    rank: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "time": self.time, "rank": self.rank, "values": dict(self.values)}


#: Largest step, rank and epoch time a record may carry; anything beyond is a corrupt record.
MAX_STEP = 10**15
_MAX_RANK = 1 << 20
_MAX_DIGITS = 20  # a step in a log line: more digits than any real run reaches


def _sane_int(value: Any, high: int) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        return None
    return value


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        out = float(value)
    except OverflowError:  # an int too large for a float
        return None
    return out if math.isfinite(out) else None


def metric_point(data: Any) -> MetricPoint | None:
    """One ``metrics.jsonl`` record, or None when it is not a sane record (skipped, never fatal)."""
    if not isinstance(data, dict):
        return None
    step = _sane_int(data.get("step"), MAX_STEP)
    rank = _sane_int(data.get("rank", 0), _MAX_RANK)
    if step is None or rank is None:
        return None
    values: dict[str, float] = {}
    for k, v in data.items():
        if k in ("step", "time", "rank") or not isinstance(k, str):
            continue
        number = _finite(v)
        if number is not None:
            values[k] = number
    return MetricPoint(step, values, _finite(data.get("time")), rank)


#: Megatron-LM's ``training_log`` line: `` iteration   10/  100 | consumed samples: 640 | ... | lm loss: 7.1E+00 |``
_MEGATRON_ITER_RE = re.compile(r"\biteration\s+(\d{1,15})/\s*\d+\s*\|(.*)$")
_MEGATRON_FIELD_RE = re.compile(r"^\s*([A-Za-z][^:|]*?)\s*:\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)")
#: Megatron's argument dump at start-up: ``  seq_length ............ 1024``
_MEGATRON_ARG_RE = re.compile(r"^\s*(seq_length|global_batch_size)\s\.+\s(\d+)\s*$")
#: Megatron's field names -> ours (what the monitor reads: loss, lr, tokens_per_s, tflops_per_card)
_MEGATRON_NAMES = {
    "lm loss": "loss",
    "learning rate": "lr",
    "grad norm": "grad_norm",
    "loss scale": "loss_scale",
    "consumed samples": "samples",
    "global batch size": "global_batch",
    "throughput per GPU (TFLOP/s/GPU)": "tflops_per_card",
    "tokens per GPU (tokens/s/GPU)": "tokens_per_s_per_card",
    "elapsed time per iteration (ms)": "step_ms",
}


def parse_megatron_line(line: str, *, seq_len: int | None = None) -> MetricPoint | None:
    """One Megatron-LM iteration line as a point (step = iteration - 1), or None.

    Megatron prints TFLOP/s per GPU but no tokens/s: with ``seq_len`` (its argument dump says it),
    tokens/s is the global batch x sequence length / the iteration time.
    """
    m = _MEGATRON_ITER_RE.search(line)
    if m is None:
        return None
    values: dict[str, float] = {}
    for part in m.group(2).split("|"):
        f = _MEGATRON_FIELD_RE.match(part)
        if f is None or f.group(1) not in _MEGATRON_NAMES:
            continue
        number = _finite(float(f.group(2)))
        if number is not None:
            values[_MEGATRON_NAMES[f.group(1)]] = number
    if "loss" not in values:
        return None  # a validation line or a skipped iteration: no training loss
    batch, ms = values.get("global_batch"), values.get("step_ms")
    if seq_len and batch and ms:
        values["tokens_per_s"] = batch * seq_len / (ms / 1000.0)
    return MetricPoint(int(m.group(1)) - 1, values)


def parse_log_metrics(text: str) -> list[MetricPoint]:
    """Loss values in free-form log lines (``step 10 loss 2.31``, ``loss=2.31``), and Megatron-LM's
    iteration lines with every field it prints (see :func:`parse_megatron_line`)."""
    out: list[MetricPoint] = []
    seq_len: int | None = None
    for line in text.splitlines():
        arg = _MEGATRON_ARG_RE.match(line)
        if arg is not None and arg.group(1) == "seq_length":
            seq_len = int(arg.group(2))
            continue
        megatron = parse_megatron_line(line, seq_len=seq_len) if "iteration" in line else None
        if megatron is not None:
            out.append(megatron)
            continue
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
        if step and len(step.group(1)) > _MAX_DIGITS:
            continue  # a corrupt line: skip it rather than fail the whole run
        number = int(step.group(1)) if step else len(out)
        if number > MAX_STEP:
            continue
        out.append(MetricPoint(number, {"loss": value}))
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
                except (ValueError, RecursionError):
                    continue
                if p is not None:
                    points.append(p)
    except FileNotFoundError:
        pass
    if points or not from_logs:
        return points
    for log in _logs_with_the_loss(paths):  # Megatron prints on the last rank (its last pipeline stage)
        try:
            points = parse_log_metrics(log.read_text(errors="replace"))
        except FileNotFoundError:
            continue
        if points:
            return points
    return []


def _logs_with_the_loss(paths: RunPaths) -> list[Path]:
    """Rank 0's log, then the last rank's (where Megatron-LM logs its iterations)."""
    ranks = []
    for log in paths.logs.glob("rank*.log") if paths.logs.is_dir() else ():
        number = log.name[4:-4]
        if number.isdigit() and number != "0":
            ranks.append((int(number), log))
    return [paths.rank_log(0), *([max(ranks)[1]] if ranks else [])]


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
