"""``starverse jobs ls|show|logs [-f]|wait|cancel|preempt``: the jobs of a backend."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import re
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._common import add_json_flag, tracking

if TYPE_CHECKING:
    from jupyter_starverse.client import Starverse
    from jupyter_starverse.experiments import (
        JobSummary,
        Progress,
    )
    from jupyter_starverse.jobmodel import Job
    from jupyter_starverse.watch import JobProgress

__all__ = ["JobDetail", "JobList", "detail", "parse_since", "register"]


def _ago(t: float | None) -> str:
    if t is None:
        return "-"
    s = max(0, int(time.time() - t))
    return f"{s}s ago" if s < 120 else f"{s // 60}m ago" if s < 7200 else f"{s // 3600}h ago"


def _duration(job: Job) -> str:
    from jupyter_starverse._format import format_duration

    if job.started is None:
        return "-"
    return format_duration((job.finished or time.time()) - job.started)


def _title(job: Job) -> str:
    """The name a person gave the job (its display name), else the job's name."""
    return job.spec.title


def _topology(job: Job) -> str:
    return f"{job.spec.nodes}x{job.spec.procs_per_node} {job.spec.template} {job.spec.accelerator}"


def _table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def _mounted(versions: Mapping[str, str], name: str) -> str:
    exact = versions.get(name)
    return name if exact in (None, name) else f"{name} -> {exact}"


def _row_topology(s: JobSummary) -> str:
    return f"{s.nodes}x{s.procs_per_node} {s.template} {s.accelerator}"


def _row_runtime(s: JobSummary) -> str:
    from jupyter_starverse._format import format_duration

    if s.started is None:
        return "-"
    return format_duration((s.finished or time.time()) - s.started)


@dataclass(frozen=True)
class JobList:
    """``jobs ls``: one row per job (of every backend unless one was named), one page of them."""

    jobs: tuple[JobSummary, ...]
    notes: tuple[str, ...] = ()
    total: int | None = None  # rows that matched the filters (None: all of them are here)
    offset: int = 0
    warnings: tuple[str, ...] = ()  # run folders left out: ``folder: why`` (malformed, foreign, half-written)

    @property
    def footer(self) -> str | None:
        """``2 run folders skipped: ...`` when the list left folders out."""
        from jupyter_starverse.experiments import skipped_text

        return skipped_text(self.warnings)

    def to_json(self) -> list[dict[str, Any]]:
        return [j.to_json() for j in self.jobs]

    def _rows(self) -> list[tuple[str, ...]]:
        return [
            (j.id, j.title, j.backend, j.state, _row_topology(j), _ago(j.created), _row_runtime(j),
             ", ".join(j.mounts) or "-")
            for j in self.jobs
        ]  # fmt: skip

    def _paging(self) -> list[str]:
        from jupyter_starverse._format import format_count

        if self.total is None or (self.offset == 0 and self.total <= len(self.jobs)):
            return []
        last = self.offset + len(self.jobs)
        more = f"; next: --offset {last}" if last < self.total else ""
        return [f"jobs {format_count(self.offset + 1)}-{format_count(last)} of {format_count(self.total)}{more}"]

    def __str__(self) -> str:
        if not self.jobs:
            text = "no jobs (start one with `starverse launch SCRIPT` or `starverse demo`)"
            if self.total is None or self.total or self.offset:
                text = "no jobs match" if self.offset == 0 else "no more jobs"
        else:
            header = ("ID", "NAME", "BACKEND", "STATE", "TOPOLOGY", "CREATED", "RUNTIME", "MOUNTS")
            text = _table([header, *self._rows()])
        footer = [self.footer] if self.footer else []
        return "\n".join([text, *self._paging(), *(f"note: {n}" for n in self.notes), *footer])

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        from jupyter_starverse._format import pretty_text

        pretty_text(p, str(self))

    def _repr_html_(self) -> str:
        from jupyter_starverse._format import html_table, state_badge

        notes = "".join(f"<div><small>{escape(n)}</small></div>" for n in self._paging())
        notes += "".join(f"<div><small>note: {escape(n)}</small></div>" for n in self.notes)
        if self.footer:
            notes += f"<div><small>{escape(self.footer)}</small></div>"
        if not self.jobs:
            return f"<div>{escape(str(self).splitlines()[0])}</div>{notes}"
        rows = [(*r[:3], state_badge(r[3]), *r[4:]) for r in self._rows()]
        header = ("id", "name", "backend", "state", "topology", "created", "runtime", "mounts")
        return html_table(header, rows, raw_columns=(3,)) + notes


@dataclass(frozen=True)
class JobDetail:
    """``jobs show``: state, nodes, progress, cost so far, ranks, latest checkpoint and where the files are."""

    job: Job
    progress: Progress
    checkpoint_step: int | None
    live: JobProgress | None = None  # ranks and the cost meter's reading (None: not watched)

    def to_json(self) -> dict[str, Any]:
        data = {**self.job.to_json(), "progress": self.progress.to_json(), "checkpoint_step": self.checkpoint_step}
        live = self.live
        data["restarts"] = self.job.restarts
        data["ranks"] = [r.to_json() for r in live.ranks] if live else []
        data["cost"] = (
            {"amount": str(live.cost) if live.cost is not None else None, "currency": live.currency,
             "text": live.cost_text}
            if live and (live.cost is not None or live.cost_text) else None
        )  # fmt: skip
        return data

    def _fields(self) -> list[tuple[str, str]]:
        from jupyter_starverse._format import format_count, format_duration, format_metric, format_rate, format_step

        j, p = self.job, self.progress
        out = [("job", f"{j.id} ({j.backend})")]
        if _title(j) != j.spec.name:
            out.append(("name", _title(j)))
        out += [
            ("state", j.state.value + (f": {j.reason}" if j.reason else "")),
            ("topology", f"{j.spec.nodes} node(s) x {j.spec.procs_per_node} proc(s), {j.spec.template}, "
                         f"{j.spec.accelerator}"),
            ("experiment", j.experiment_dir),
        ]  # fmt: skip
        if j.spec.mounts:  # the exact version each mount read (pinned at launch)
            out.append(("mounts", ", ".join(_mounted(j.spec.mount_versions, m) for m in j.spec.mounts)))
        if j.spec.env_id or j.spec.workdir_id:  # `starverse env show ID` lists the packages
            env = f"{j.spec.env_id[:12]} (--env-from {j.spec.env_from})" if j.spec.env_id else "the image's"
            out.append(("environment", env + (f", workdir {j.spec.workdir_id[:12]}" if j.spec.workdir_id else "")))
        if j.started is not None:
            out.append(("runtime", _duration(j)))
        if j.restarts:
            out.append(("restarts", str(j.restarts)))
        if p.step is not None:
            speed = f", {format_rate(p.steps_per_s)}" if p.steps_per_s else ""
            eta = f", ETA {format_duration(p.eta_s)}" if p.eta_s is not None and not j.state.finished else ""
            rates = ("tokens_per_s", "tflops_per_card", "tflops")
            values = " ".join(f"{k} {format_metric(v)}" for k, v in p.values.items() if k not in rates)
            out.append(("progress", f"{format_step(p.step + 1, p.total)}{speed}{eta}  {values}".rstrip()))
            throughput = []  # what the monitor shows: the last step's tokens/s and model TFLOPS per card
            if "tokens_per_s" in p.values:
                throughput.append(f"{format_count(round(p.values['tokens_per_s']))} tokens/s")
            tflops = p.values.get("tflops_per_card", p.values.get("tflops"))
            if tflops is not None:
                throughput.append(f"{format_metric(tflops)} TFLOPS/card")
            if throughput:
                out.append(("throughput", ", ".join(throughput)))
        if self.live is not None and self.live.cost_text:
            out.append(("cost", self.live.cost_text + ("" if j.state.finished else " so far")))
        if self.checkpoint_step is not None:
            out.append(("checkpoint", format_step(self.checkpoint_step)))
        return out

    def _rank_rows(self) -> list[tuple[str, ...]]:
        from jupyter_starverse._format import format_step

        if self.live is None:
            return []
        rows: list[tuple[str, ...]] = []
        for r in self.live.ranks:
            step = format_step(r.last_step + 1 if r.last_step is not None else None).removeprefix("step ")
            why = f" {r.error}" if r.error else ""
            restarts = f", {r.restarts} restart{'s' if r.restarts != 1 else ''}" if r.restarts else ""
            stats = f"  {r.stats_text()}" if r.stats_text() else ""
            rows.append((f"rank {r.rank}", f"node{r.node}", r.state.value, f"step {step}{stats}{restarts}{why}"))
        return rows

    def __str__(self) -> str:
        lines = [f"{k:<11} {v}" for k, v in self._fields()]
        for n in self.job.nodes:
            extra = f" exit {n.exit_code}" if n.exit_code is not None else ""
            lines.append(f"  node{n.index}     {n.state.value}{extra}" + (f" ({n.reason})" if n.reason else ""))
        ranks = self._rank_rows()
        if ranks:
            lines += ["ranks", *("  " + line for line in _table(ranks).splitlines())]
        return "\n".join(lines)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        from jupyter_starverse._format import pretty_text

        pretty_text(p, str(self))

    def _repr_html_(self) -> str:
        from jupyter_starverse._format import html_table, state_badge

        rows = [(k, state_badge(self.job.state.value) + (f" {escape(self.job.reason)}" if self.job.reason else ""))
                if k == "state" else (k, escape(v)) for k, v in self._fields()]  # fmt: skip
        for n in self.job.nodes:
            extra = f" exit {n.exit_code}" if n.exit_code is not None else ""
            why = f" ({escape(n.reason)})" if n.reason else ""
            rows.append((f"node{n.index}", state_badge(n.state.value) + escape(extra) + why))
        table = html_table(("", ""), rows, raw_columns=(0, 1))
        ranks = self._rank_rows()
        if ranks:
            table += html_table(
                ("rank", "node", "state", "progress"),
                [(a, b, state_badge(c), escape(d)) for a, b, c, d in ranks],
                raw_columns=(2, 3),
            )
        return table


def detail(job: Job, client: Starverse | None = None) -> JobDetail:
    """A job with its progress (from metrics), latest checkpoint step and, with ``client``, ranks and cost."""
    from jupyter_starverse.errors import StarverseError
    from jupyter_starverse.experiments import latest_checkpoint, progress, read_metrics

    points = read_metrics(Path(job.experiment_dir)) if Path(job.experiment_dir).is_dir() else []
    ckpt = latest_checkpoint(Path(job.experiment_dir)) if Path(job.experiment_dir).is_dir() else None
    live = None
    if client is not None:
        try:
            live = client.watch(job.id, backend=job.backend).progress(job=job)
        except StarverseError:
            live = None  # ranks and cost are extras: the job itself is still shown
    return JobDetail(job, progress(points, total=job.spec.steps), ckpt.step if ckpt else None, live)


def parse_since(text: str | None, *, now: float | None = None) -> float | None:
    """``--since``: ``30m``, ``2h``, ``7d``, ``90s`` ago, or a date/time ``2026-12-01[T10:00]`` (UTC)."""
    from jupyter_starverse.errors import BadInputError

    if text is None:
        return None
    now = time.time() if now is None else now
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    if m:
        return now - float(m.group(1)) * _UNITS[m.group(2)]
    try:
        when = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise BadInputError(
            f"--since {text!r} is neither a duration nor a date",
            field="since",
            hint="e.g. --since 30m, --since 2d, --since 2026-12-01 or --since 2026-12-01T10:00",
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return when.timestamp()


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def _ls(client: Starverse, args: argparse.Namespace) -> JobList:
    limit = args.limit if args.limit and args.limit > 0 else None
    page = client.job_page(
        state=tuple(args.state or ()),
        backend=(args.backend,) if args.backend else (),
        experiment=tuple(args.experiment or ()),
        since=parse_since(args.since),
        offset=args.offset,
        limit=limit,
    )
    found = JobList(page.items, page.notes, page.total, page.offset, page.warnings)
    if found.footer and getattr(args, "json", False):
        print(f"# {found.footer}", file=sys.stderr)  # the JSON stays a list of jobs
    return found


def _show(client: Starverse, args: argparse.Namespace) -> JobDetail:
    return detail(client.attach(args.job_id, backend=args.backend), client)


def _backend_of(client: Starverse, args: argparse.Namespace) -> str:
    """The backend named by --backend, else the one that knows the job."""
    return args.backend or client.attach(args.job_id).backend


def _logs(client: Starverse, args: argparse.Namespace) -> Iterator[Any]:
    backend = _backend_of(client, args)
    lines = client.backend(backend).logs(args.job_id, follow=args.follow, rank=args.rank)
    # following: Ctrl-C says the job keeps running and how to cancel or follow it again
    with tracking(args.job_id, backend) if args.follow else contextlib.nullcontext():
        for line in lines:
            if args.json:
                yield {"node": line.node, "rank": line.rank, "text": line.text}
            else:
                yield line.render()


def _wait(client: Starverse, args: argparse.Namespace) -> JobDetail:
    from jupyter_starverse.errors import StarverseError
    from jupyter_starverse.jobmodel import JobState

    job = client.backend(_backend_of(client, args)).wait(args.job_id, timeout=args.timeout)
    if job.state in (JobState.FAILED, JobState.CANCELLED) and not args.json:
        raise StarverseError(
            f"job {job.id} {job.state.value}" + (f": {job.reason}" if job.reason else ""),
            hint=f"see `starverse jobs logs {job.id}`",
        )
    return detail(job, client)


def _cancel(client: Starverse, args: argparse.Namespace) -> JobDetail:
    return detail(client.backend(_backend_of(client, args)).cancel(args.job_id), client)


def _preempt(client: Starverse, args: argparse.Namespace) -> JobDetail:
    return detail(client.backend(_backend_of(client, args)).preempt(args.job_id), client)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from jupyter_starverse.jobmodel import JobState

    p = sub.add_parser("jobs", help="list, inspect, follow, wait for and cancel jobs (alone: jobs ls)")
    jobs = p.add_subparsers(dest="jobs_command", metavar="ACTION", parser_class=type(p))
    # `starverse jobs` / `%sv jobs` alone lists the jobs, as `jobs ls` with its defaults does
    p.set_defaults(run=_ls, state=None, experiment=None, since=None, limit=50, offset=0, backend=None, json=False)

    def common(q: argparse.ArgumentParser, *, job_id: bool = True) -> None:
        if job_id:
            q.add_argument("job_id", metavar="JOB_ID")
        q.add_argument("--backend", default=None, help="local, kubernetes or slurm (default: every configured backend)")
        add_json_flag(q)

    q = jobs.add_parser("ls", help="jobs, newest first (from the job index: fast with thousands of runs)")
    common(q, job_id=False)
    q.add_argument(
        "--state", action="append", choices=[s.value for s in JobState], metavar="STATE",
        help="only jobs in this state (repeatable): pending, running, succeeded, failed, cancelled, ...",
    )  # fmt: skip
    q.add_argument("--experiment", action="append", metavar="NAME", help="only runs of this experiment (repeatable)")
    q.add_argument("--since", default=None, metavar="WHEN", help="only jobs active since: 30m, 2h, 7d or a date")
    q.add_argument("--limit", type=int, default=50, metavar="N", help="at most N jobs (default: 50; 0: all)")
    q.add_argument("--offset", type=int, default=0, metavar="N", help="skip the N newest matching jobs")
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
    q = jobs.add_parser(
        "preempt", help="preemption drill: SIGTERM a node as a provider would; the job checkpoints and resumes"
    )
    common(q)
    q.set_defaults(run=_preempt)
