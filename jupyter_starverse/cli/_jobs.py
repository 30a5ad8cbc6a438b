"""``starverse jobs ls|show|logs [-f]|wait|cancel``: the jobs of a backend."""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_starverse.client import Starverse
from jupyter_starverse.errors import StarverseError
from jupyter_starverse.experiments import Progress, latest_checkpoint, progress, read_metrics
from jupyter_starverse.jobmodel import Job, JobState

from ._common import add_json_flag

__all__ = ["JobDetail", "JobList", "detail", "register"]


def _ago(t: float | None) -> str:
    if t is None:
        return "-"
    s = max(0, int(time.time() - t))
    return f"{s}s ago" if s < 120 else f"{s // 60}m ago" if s < 7200 else f"{s // 3600}h ago"


def _duration(job: Job) -> str:
    if job.started is None:
        return "-"
    s = int((job.finished or time.time()) - job.started)
    return f"{s // 60}m{s % 60:02d}s"


@dataclass(frozen=True)
class JobList:
    """``jobs ls``: one row per job."""

    jobs: tuple[Job, ...]

    def to_json(self) -> list[dict[str, Any]]:
        return [j.to_json() for j in self.jobs]

    def __str__(self) -> str:
        if not self.jobs:
            return "no jobs (start one with `starverse launch SCRIPT` or `starverse demo`)"
        rows = [("ID", "STATE", "TOPOLOGY", "CREATED", "RUNTIME")]
        for j in self.jobs:
            topo = f"{j.spec.nodes}x{j.spec.procs_per_node} {j.spec.template} {j.spec.accelerator}"
            rows.append((j.id, j.state.value, topo, _ago(j.created), _duration(j)))
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


@dataclass(frozen=True)
class JobDetail:
    """``jobs show``: state, nodes, progress, latest checkpoint and where the files are."""

    job: Job
    progress: Progress
    checkpoint_step: int | None

    def to_json(self) -> dict[str, Any]:
        return {**self.job.to_json(), "progress": self.progress.to_json(), "checkpoint_step": self.checkpoint_step}

    def __str__(self) -> str:
        j, p = self.job, self.progress
        lines = [
            f"job         {j.id} ({j.backend})",
            f"state       {j.state.value}" + (f": {j.reason}" if j.reason else ""),
            f"topology    {j.spec.nodes} node(s) x {j.spec.procs_per_node} proc(s), "
            f"{j.spec.template}, {j.spec.accelerator}",
            f"experiment  {j.experiment_dir}",
        ]
        if p.step is not None:
            total = f"/{p.total}" if p.total else ""
            speed = f", {p.steps_per_s:.2f} steps/s" if p.steps_per_s else ""
            eta = f", ETA {int(p.eta_s)}s" if p.eta_s is not None and not j.state.finished else ""
            values = " ".join(f"{k} {v:.4g}" for k, v in p.values.items())
            lines.append(f"progress    step {p.step}{total}{speed}{eta}  {values}".rstrip())
        if self.checkpoint_step is not None:
            lines.append(f"checkpoint  step {self.checkpoint_step}")
        for n in j.nodes:
            extra = f" exit {n.exit_code}" if n.exit_code is not None else ""
            lines.append(f"  node{n.index}     {n.state.value}{extra}" + (f" ({n.reason})" if n.reason else ""))
        return "\n".join(lines)


def detail(job: Job) -> JobDetail:
    """A job with its progress (from metrics) and latest checkpoint step."""
    points = read_metrics(Path(job.experiment_dir)) if Path(job.experiment_dir).is_dir() else []
    ckpt = latest_checkpoint(Path(job.experiment_dir)) if Path(job.experiment_dir).is_dir() else None
    return JobDetail(job, progress(points, total=job.spec.steps), ckpt.step if ckpt else None)


def _ls(client: Starverse, args: argparse.Namespace) -> JobList:
    return JobList(tuple(client.jobs(backend=args.backend)))


def _show(client: Starverse, args: argparse.Namespace) -> JobDetail:
    return detail(client.attach(args.job_id, backend=args.backend))


def _logs(client: Starverse, args: argparse.Namespace) -> Iterator[Any]:
    lines = client.backend(args.backend).logs(args.job_id, follow=args.follow, rank=args.rank)
    for line in lines:
        if args.json:
            yield {"node": line.node, "rank": line.rank, "text": line.text}
        else:
            yield line.render()


def _wait(client: Starverse, args: argparse.Namespace) -> JobDetail:
    job = client.backend(args.backend).wait(args.job_id, timeout=args.timeout)
    if job.state in (JobState.FAILED, JobState.CANCELLED) and not args.json:
        raise StarverseError(
            f"job {job.id} {job.state.value}" + (f": {job.reason}" if job.reason else ""),
            hint=f"see `starverse jobs logs {job.id}`",
        )
    return detail(job)


def _cancel(client: Starverse, args: argparse.Namespace) -> JobDetail:
    return detail(client.backend(args.backend).cancel(args.job_id))


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("jobs", help="list, inspect, follow, wait for and cancel jobs")
    jobs = p.add_subparsers(dest="jobs_command", metavar="ACTION", parser_class=type(p))

    def common(q: argparse.ArgumentParser, *, job_id: bool = True) -> None:
        if job_id:
            q.add_argument("job_id", metavar="JOB_ID")
        q.add_argument("--backend", default=None, help="local or kubernetes (default: settings)")
        add_json_flag(q)

    q = jobs.add_parser("ls", help="jobs, newest first")
    common(q, job_id=False)
    q.set_defaults(run=_ls)
    q = jobs.add_parser("show", help="state, nodes, progress and checkpoint of a job")
    common(q)
    q.set_defaults(run=_show)
    q = jobs.add_parser("logs", help="log lines of every rank, prefixed [rank]")
    common(q)
    q.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    q.add_argument("--rank", type=int, default=None, help="only this rank")
    q.set_defaults(run=_logs)
    q = jobs.add_parser("wait", help="block until the job ends; fails if it did not succeed")
    common(q)
    q.add_argument("--timeout", type=float, default=None, help="seconds to wait at most")
    q.set_defaults(run=_wait)
    q = jobs.add_parser("cancel", help="stop every process of a job (workers checkpoint first)")
    common(q)
    q.set_defaults(run=_cancel)
