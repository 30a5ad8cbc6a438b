"""What a monitor shows about a job, computed from the job record, its metrics and prices.

Pure functions: the REST handler of the jobs endpoint, the CLI and the notebook widget use
the same summary, and the same progress line (:meth:`JobProgress.line_fields`), so the side
panel, the terminal and the widget always agree.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from jupyter_starverse._format import format_count, format_metric, format_rate
from jupyter_starverse._format import format_duration as _format_duration
from jupyter_starverse.experiments import JobSummary, MetricPoint, progress
from jupyter_starverse.jobmodel import Job, JobState

if TYPE_CHECKING:
    from jupyter_starverse.costs import Cost

__all__ = ["JobProgress", "RankRecord", "RankView", "format_duration", "job_summary", "startup_phase", "summarize"]

_NOT_VALUES = {"step", "time", "rank", "node", "world_size", "epoch"}


@dataclass(frozen=True)
class RankRecord:
    """What a rank's worker recorded about itself (``pids/rankN.json``, ``errors/rankN.json``)."""

    rank: int
    node: int
    local_rank: int
    pid: int | None = None
    attempt: int = 0
    error: str | None = None
    error_attempt: int | None = None


@dataclass(frozen=True)
class RankView:
    """One rank of a job as the monitor shows it."""

    rank: int
    node: int
    local_rank: int
    state: JobState
    last_step: int | None
    pid: int | None = None
    restarts: int = 0
    error: str | None = None
    steps_per_s: float | None = None  # this rank's own speed over its last records
    metric: str | None = None  # the job's chosen metric (loss) ...
    value: float | None = None  # ... as this rank last logged it
    tokens_per_s: float | None = None  # when the script logs ``tokens_per_s``
    tflops: float | None = None  # when it logs ``tflops_per_card`` (or ``tflops``)

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "node": self.node,
            "local_rank": self.local_rank,
            "state": self.state.value,
            "last_step": self.last_step,
            "pid": self.pid,
            "restarts": self.restarts,
            "error": self.error,
            "steps_per_s": self.steps_per_s,
            "metric": self.metric,
            "value": self.value,
            "tokens_per_s": self.tokens_per_s,
            "tflops": self.tflops,
            "stats": self.stats_text(),
        }

    def stats_text(self) -> str:
        """``2.10 steps/s  loss 1.234  5,120 tokens/s  1.2 TFLOPS`` (what this rank reported)."""
        bits = []
        if self.steps_per_s is not None:
            bits.append(format_rate(self.steps_per_s))
        if self.metric and self.value is not None:
            bits.append(f"{self.metric} {format_metric(self.value)}")
        if self.tokens_per_s is not None:
            bits.append(f"{format_count(round(self.tokens_per_s))} tokens/s")
        if self.tflops is not None:
            bits.append(f"{format_metric(self.tflops)} TFLOPS")
        return "  ".join(bits)


@dataclass(frozen=True)
class JobProgress:
    """Progress of one job: step, ETA, throughput, the chosen metric series, cost so far."""

    job_id: str
    state: JobState
    step: int | None
    total_steps: int | None
    metric: str | None
    value: float | None
    points: tuple[tuple[int, float], ...]
    steps_per_s: float | None
    eta_s: float | None
    elapsed_s: float
    cost: Decimal | None
    currency: str | None
    cost_text: str | None
    ranks: tuple[RankView, ...]
    restarts: int = 0  # relaunches of the whole job (preemptions, lost nodes, retried failures)
    tokens_per_s: float | None = None  # the lead rank's last ``tokens_per_s``, when the script logs it
    tflops: float | None = None  # its last ``tflops_per_card`` (model FLOPs per card), when logged
    #: While it starts (no step logged yet): ``startup_phase``, e.g. ``waiting for rendezvous (3/4 ranks up)``
    phase: str | None = None

    @property
    def fraction(self) -> float | None:
        """Share of the steps done (0..1), None when the total is unknown."""
        if not self.total_steps or self.step is None:
            return None
        return max(0.0, min(1.0, (self.step + 1) / self.total_steps))

    def to_json(self, *, points: bool = True) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "state": self.state.value,
            "step": self.step,
            "total_steps": self.total_steps,
            "fraction": self.fraction,
            "metric": self.metric,
            "value": self.value,
            "points": [list(p) for p in self.points] if points else [],
            "steps_per_s": self.steps_per_s,
            "eta_s": self.eta_s,
            "elapsed_s": self.elapsed_s,
            "cost": str(self.cost) if self.cost is not None else None,
            "currency": self.currency,
            "cost_text": self.cost_text,
            "ranks": [r.to_json() for r in self.ranks],
            "restarts": self.restarts,
            "tokens_per_s": self.tokens_per_s,
            "tflops": self.tflops,
            "phase": self.phase,
            "line": self.line(),
            "line_fields": [{"key": key, "text": text} for key, text in self.line_fields()],
        }

    def line_fields(self) -> list[tuple[str, str]]:
        """The progress line as ``(key, text)`` fields, in order; the one definition of the line.

        Keys: ``state``, ``phase``, ``step``, ``metric``, ``speed``, ``tokens``, ``tflops``, ``eta``, ``elapsed``,
        ``cost``, ``restarts``.
        REST serves them (``line_fields``) so the side panel shows exactly what Python prints.
        """
        fields = [("state", self.state.value)]
        if self.phase is not None:  # "running" alone while every rank starts says nothing
            fields.append(("phase", self.phase))
        if self.step is not None:
            total = f"/{self.total_steps}" if self.total_steps else ""
            pct = f" ({self.fraction:.0%})" if self.fraction is not None else ""
            fields.append(("step", f"step {self.step + 1}{total}{pct}"))
        if self.value is not None and self.metric:
            fields.append(("metric", f"{self.metric} {format_metric(self.value)}"))
        if self.steps_per_s is not None:
            fields.append(("speed", format_rate(self.steps_per_s)))
        if self.tokens_per_s is not None:
            fields.append(("tokens", f"{format_count(round(self.tokens_per_s))} tokens/s"))
        if self.tflops is not None:
            fields.append(("tflops", f"{format_metric(self.tflops)} TFLOPS/card"))
        if self.eta_s is not None and not self.state.finished:
            fields.append(("eta", f"ETA {format_duration(self.eta_s)}"))
        fields.append(("elapsed", f"elapsed {format_duration(self.elapsed_s)}"))
        if self.cost_text is not None:
            fields.append(("cost", f"cost {self.cost_text}"))
        if self.restarts:
            fields.append(("restarts", f"{self.restarts} restart{'s' if self.restarts != 1 else ''}"))
        return fields

    def line(self) -> str:
        """One line of text: ``step 40/100 (40%)  loss 1.23  4.10 steps/s  ETA 15s  cost 0.01 USD``."""
        return "  ".join(text for _, text in self.line_fields())


def format_duration(seconds: float) -> str:
    """``75`` -> ``1m15s``; ``3700`` -> ``1h01m`` (see :func:`jupyter_starverse._format.format_duration`)."""
    return _format_duration(seconds)


_TFLOPS_KEYS = ("tflops_per_card", "tflops")


def _tflops(values: Mapping[str, float]) -> float | None:
    return next((values[k] for k in _TFLOPS_KEYS if k in values), None)


def _rate(points: Sequence[MetricPoint]) -> float | None:
    """Steps per second between a rank's last two timed records."""
    timed = [p for p in points if p.time is not None]
    if len(timed) < 2:
        return None
    a, b = timed[-2], timed[-1]
    dt = (b.time or 0.0) - (a.time or 0.0)
    return (b.step - a.step) / dt if dt > 0 and b.step > a.step else None


def _with_stats(view: RankView, points: Sequence[MetricPoint], metric: str | None, speed: float | None) -> RankView:
    if not points:
        return view
    last = points[-1].values
    return replace(
        view,
        steps_per_s=speed if speed is not None else _rate(points),
        metric=metric if metric in last else None,
        value=last.get(metric) if metric else None,
        tokens_per_s=last.get("tokens_per_s"),
        tflops=_tflops(last),
    )


def _rank_view(job: Job, rank: int, records: Sequence[RankRecord], last_step_of: dict[int, int]) -> RankView:
    spec = job.spec
    rec = next((r for r in records if r.rank == rank), None)
    node = rec.node if rec else rank // spec.procs_per_node
    local = rec.local_rank if rec else rank % spec.procs_per_node
    node_state = next((n.state for n in job.nodes if n.index == node), job.state)
    state = node_state
    failed_now = rec is not None and rec.error is not None and (rec.error_attempt or 0) >= rec.attempt
    if failed_now:
        state = JobState.FAILED  # until torchrun restarts it (a newer attempt clears this)
    elif rec is None and job.state is JobState.RUNNING:
        state = JobState.PENDING  # its worker has not started yet
    return RankView(
        rank,
        node,
        local,
        state,
        last_step_of.get(rank),
        pid=rec.pid if rec else None,
        restarts=rec.attempt if rec else 0,
        error=rec.error if failed_now and rec else None,
    )


def _pick_metric(records: Sequence[MetricPoint]) -> str | None:
    for rec in records:
        if "loss" in rec.values:
            return "loss"
    for rec in records:
        for key in rec.values:
            if key not in _NOT_VALUES:
                return key
    return None


def summarize(
    job: Job,
    records: Sequence[MetricPoint],
    *,
    now: float | None = None,
    cost: Cost | str | None = None,
    ranks: Sequence[RankRecord] = (),
    rank_points: Mapping[int, Sequence[MetricPoint]] | None = None,
) -> JobProgress:
    """Build the :class:`JobProgress` of ``job`` from its metric records.

    Parameters
    ----------
    job
        The job as the backend sees it now.
    records
        Its metric records in file order (any rank).
    now
        Current time (``time.time()`` when omitted); used for elapsed time of running jobs.
    cost
        What the job cost so far (the costs meter), or why it could not be metered.
    ranks
        What each rank's worker recorded (pid, node, restarts, error); ranks without a
        record are placed by the launch order ``node x procs_per_node + local rank``.
    rank_points
        The last records each rank other than the lead kept of itself (``ranks/rankN.jsonl``):
        its own speed, loss, tokens/s and TFLOPS.
    """
    now = time.time() if now is None else now
    spec = job.spec
    metric = _pick_metric(records)
    # the chart follows the lowest rank that logs (rank 0 usually); one value per step
    lead = min((r.rank for r in records), default=0)
    series: dict[int, float] = {}
    last_step_of: dict[int, int] = {}
    for rec in records:
        last_step_of[rec.rank] = max(rec.step, last_step_of.get(rec.rank, rec.step))
        value = rec.values.get(metric) if metric else None
        if rec.rank == lead and value is not None and math.isfinite(value):
            series[rec.step] = float(value)
    points = tuple(sorted(series.items()))
    lead_records = [r for r in records if r.rank == lead]
    where = progress(lead_records, total=spec.steps)
    start = job.started or job.created
    end = job.finished if job.finished is not None else now
    elapsed = max(0.0, end - start) if job.state is not JobState.PENDING else 0.0
    amount: Decimal | None = None
    currency: str | None = None
    cost_text: str | None = cost if isinstance(cost, str) else None
    if cost is not None and not isinstance(cost, str):
        amount, currency, cost_text = cost.amount, cost.currency, cost.figure
        if cost.budget is not None:
            cost_text += f" of {cost.budget} {cost.currency} budget" + (" (reached)" if cost.over_budget else "")
    own = {r: list(p) for r, p in (rank_points or {}).items() if r != lead}
    for r, pts in own.items():
        if pts:
            last_step_of[r] = max(last_step_of.get(r, pts[-1].step), pts[-1].step)
    views = [_rank_view(job, r, ranks, last_step_of) for r in range(spec.world_size)]
    views = [
        _with_stats(v, lead_records, metric, where.steps_per_s) if v.rank == lead
        else _with_stats(v, own.get(v.rank, ()), metric, None)
        for v in views
    ]  # fmt: skip
    last_values = lead_records[-1].values if lead_records else {}
    return JobProgress(
        job_id=job.id,
        state=job.state,
        step=where.step,
        total_steps=spec.steps,
        metric=metric,
        value=points[-1][1] if points else None,
        points=points,
        steps_per_s=where.steps_per_s,
        eta_s=where.eta_s,
        elapsed_s=elapsed,
        cost=amount,
        currency=currency,
        cost_text=cost_text,
        ranks=tuple(views),
        restarts=job.restarts,
        tokens_per_s=last_values.get("tokens_per_s"),
        tflops=_tflops(last_values),
        phase=startup_phase(job, ranks) if where.step is None and not job.state.finished else None,
    )


def startup_phase(job: Job, ranks: Sequence[RankRecord] = (), *, step: int | None = None) -> str:
    """What a job is doing right now, in words a person follows while it starts.

    ``queued``, ``starting 2 nodes``, ``waiting for rendezvous (1/4 ranks up)``,
    ``joining the process group (4/4 ranks up)``, ``training, step 3/60``, then the final state.
    ``ranks`` are the workers' own records (a rank writes one as soon as torchrun started it);
    ``step`` is the last step any rank logged.
    """
    spec = job.spec
    if job.state.finished:
        return job.state.value + (f": {job.reason}" if job.reason else "")
    if step is not None:
        return "training, " + ("step " + (f"{step + 1}/{spec.steps}" if spec.steps else f"{step + 1}"))
    if job.state is JobState.PENDING and not job.nodes:
        return "queued: waiting for the scheduler to place the job" if job.backend != "local" else "starting"
    if job.state.value in ("preempted", "resuming"):
        return f"{job.state.value}: resuming from the newest checkpoint" + (f" ({job.reason})" if job.reason else "")
    started = [n for n in job.nodes if n.state is not JobState.PENDING]
    up = len({r.rank for r in ranks})
    if up == 0:
        if not started:
            return f"starting {spec.nodes} node{'s' if spec.nodes != 1 else ''}"
        return f"waiting for rendezvous ({len(started)}/{spec.nodes} node{'s' if spec.nodes != 1 else ''} up)"
    if up < spec.world_size:
        return f"waiting for rendezvous ({up}/{spec.world_size} ranks up)"
    return f"joining the process group and loading the model ({up}/{spec.world_size} ranks up)"


def job_summary(job: Job, cached: JobSummary | None = None) -> JobSummary:
    """The job-list row of ``job`` as its backend sees it now (the cached row's cost is kept)."""
    spec = job.spec
    return JobSummary(
        id=job.id,
        backend=job.backend,
        name=spec.name,
        title=spec.title,
        experiment=spec.experiment_name,
        run_dir=job.experiment_dir,
        state=job.state.value,
        created=job.created,
        started=job.started,
        finished=job.finished,
        reason=job.reason,
        nodes=spec.nodes,
        procs_per_node=spec.procs_per_node,
        template=spec.template,
        accelerator=spec.accelerator,
        steps=spec.steps,
        restarts=job.restarts,
        cost=cached.cost if cached is not None else None,
        mounts=spec.mounted,
    )
