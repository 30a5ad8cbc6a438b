"""``/jupyter-starverse/jobs``: list, live state, logs (tail or follow), cancel, preview.

| verb   | path                        | answer                                             |
|--------|-----------------------------|----------------------------------------------------|
| GET    | jobs?state=&backend=&since=...| ``JobListView``: a page of the job index (ETag, 304)|
| GET    | jobs/ID                     | ``JobView`` with the metric series                 |
| DELETE | jobs/ID                     | cancel; the ``JobView`` after it                   |
| POST   | jobs/ID/cancel              | same as DELETE                                     |
| POST   | jobs/ID/preempt             | preemption drill (409 unless running); the ``JobView`` after it |
| GET    | jobs/ID/logs?tail=&rank=    | ``LogTail``; ``follow=1`` streams NDJSON lines     |
| POST   | jobs/preview                | ``LaunchPreview`` of body ``{"spec", "backend"?, "output"?}`` |

A job's truth is its backend (experiment folder or cluster), so after a server restart every
route answers as before. A job's TensorBoard is :mod:`._tensorboard`'s.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tornado import web
from tornado.iostream import StreamClosedError

from jupyter_starverse._settings import BACKENDS
from jupyter_starverse.errors import (
    BackendUnavailableError,
    BadInputError,
    NotFoundError,
    StarverseError,
)
from jupyter_starverse.experiments import (
    JobSummary,
    skipped_text,
)
from jupyter_starverse.jobmodel import Job, JobSpec, JobState, LaunchBackend, LogLine
from jupyter_starverse.runtime import reference_series
from jupyter_starverse.watch import JobProgress

from ._base import StarverseHandler, parse_int

__all__ = [
    "JobListView",
    "JobView",
    "LogTail",
    "routes",
]

_MAX_TAIL = 5000
_MAX_PAGE = 500
_ID = r"(?P<job_id>[A-Za-z0-9][A-Za-z0-9._-]{0,127})"


@dataclass(frozen=True)
class JobView:
    """A job and its progress, as the side panel shows it."""

    job: Job
    progress: JobProgress
    points: bool = False

    def to_json(self) -> dict[str, Any]:
        data = self.job.to_json()
        data["progress"] = self.progress.to_json(points=self.points)
        if self.points:  # a reproduction's reference curve at the same steps (the chart draws it dashed)
            steps = [s for s, _ in self.progress.points]
            curve = self.job.spec.env.get("STARVERSE_REFERENCE_CURVE")
            found = reference_series(curve, steps, total_steps=self.progress.total_steps)
            ok = found is not None and found[0].metric == (self.progress.metric or "loss")
            data["progress"]["reference"] = [list(p) for p in found[1]] if found and ok else []
            data["progress"]["reference_label"] = f"{found[0].kind}: {found[0].source}" if found and ok else None
        return data


@dataclass(frozen=True)
class LogTail:
    """The last lines of a job's logs."""

    job_id: str
    lines: tuple[LogLine, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "lines": [{"node": ln.node, "rank": ln.rank, "text": ln.text} for ln in self.lines],
        }


def _int_arg(value: str | None, name: str, *, default: int | None, low: int, high: int) -> int | None:
    return parse_int(value, name, default=default, low=low, high=high)


class _JobsBase(StarverseHandler):
    async def backend(self) -> LaunchBackend:
        """The backend of ``?backend=``, made in the thread pool: building one may read a kube config
        or probe the cluster, which must not hold up the event loop (and every other request)."""
        return await self.run(self.client.backend, self.query("backend"))

    def view(self, job: Job, *, points: bool) -> JobView:
        # The facade keeps one watch per job, so a poll reads only the new metric lines.
        watch = self.client.watch(job.id, backend=job.backend)
        return JobView(job, watch.progress(job=job), points)


@dataclass(frozen=True)
class JobListView:
    """``GET jobs``: one page of the job list with each row's progress, and how to ask for the next."""

    items: tuple[JobView, ...]
    total: int
    offset: int
    limit: int | None
    now: float
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()  # run folders left out (malformed, foreign, half-written): ``folder: why``

    def to_json(self) -> dict[str, Any]:
        return {
            "items": [v.to_json() for v in self.items],
            "total": self.total,
            "offset": self.offset,
            "limit": self.limit,
            "now": self.now,
            "notes": list(self.notes),
            "warnings": list(self.warnings),
        }


_STATES = tuple(s.value for s in JobState)
_LIVE_EVERY_S = 15.0  # a page with unfinished jobs is answered anew at least this often


def _names(value: str | None, name: str, allowed: tuple[str, ...] | None = None) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(v.strip() for v in (value or "").split(",") if v.strip()))
    bad = [n for n in names if allowed is not None and n not in allowed]
    if bad:
        raise BadInputError(
            f"?{name}={bad[0]!r} is not one of {', '.join(allowed or ())}",
            field=name,
            hint=f"e.g. ?{name}={(allowed or ('x',))[0]} (several: comma-separated)",
        )
    return names


def _since(value: str | None) -> float | None:
    if value is None or value == "":
        return None
    try:
        since = float(value)
    except ValueError:
        since = float("nan")
    if not math.isfinite(since) or since < 0:
        raise BadInputError(
            f"?since={value[:40]!r} is not a time",
            field="since",
            hint="seconds since the epoch, e.g. the `now` of the last answer",
        )
    return since


def _live_tag(page_etag: str, rows: tuple[JobSummary, ...]) -> str:
    """The page's validator plus what moves while a job runs (its metrics), checked every 15 s at least."""
    moving = []
    for row in rows:
        if row.is_finished:
            continue
        try:
            size = (Path(row.run_dir) / "metrics.jsonl").stat().st_size
        except OSError:
            size = -1
        moving.append(f"{row.id}:{size}")
    if not moving:
        return page_etag
    bucket = int(time.time() // _LIVE_EVERY_S)
    return (
        page_etag[:-1]
        + "-"
        + hashlib.sha1(f"{bucket}|{'|'.join(moving)}".encode(), usedforsecurity=False).hexdigest()[:12]
        + '"'
    )


class JobsHandler(_JobsBase):
    """``GET jobs?state=&backend=&experiment=&since=&offset=&limit=``: a page of the job index.

    The answer carries an ``ETag``; a poll with ``If-None-Match`` gets ``304`` and no body while
    nothing on the page changed (a finished page costs a look at the index, not at the runs).
    """

    @web.authenticated
    async def get(self) -> None:
        state = _names(self.query("state"), "state", _STATES)
        backend = _names(self.query("backend"), "backend", BACKENDS)
        experiment = _names(self.query("experiment"), "experiment")
        since = _since(self.query("since"))
        offset = _int_arg(self.query("offset"), "offset", default=0, low=0, high=1 << 30) or 0
        limit = _int_arg(self.query("limit"), "limit", default=50, low=1, high=_MAX_PAGE)
        now = time.time()
        page = await self.run(
            lambda: self.client.job_page(
                state=state, backend=backend, experiment=experiment, since=since, offset=offset, limit=limit
            )
        )
        tag = _live_tag(page.etag, page.items)
        self.set_header("Etag", tag)
        self.set_header("Cache-Control", "no-cache")
        if self.check_etag_header():
            self.set_status(304)
            self.finish()
            return

        def views() -> JobListView:
            out, notes, skipped = [], list(page.notes), list(page.warnings)
            for row in page.items:
                try:
                    out.append(self.view(self.client.backend(row.backend).get(row.id), points=False))
                except (BackendUnavailableError, NotFoundError) as e:
                    notes.append(f"{row.id} ({row.backend}) left out: {e.message}")
                except StarverseError as e:  # one broken run folder never fails the panel's list
                    skipped.append(f"{row.run_dir}: {e.message}")
            footer = skipped_text(skipped)
            notes += [footer] if footer else []  # the panel shows notes
            return JobListView(tuple(out), page.total, page.offset, page.limit, now, tuple(dict.fromkeys(notes)),
                               tuple(skipped))  # fmt: skip

        self.finish_json(await self.run(views))


class JobHandler(_JobsBase):
    @web.authenticated
    async def get(self, job_id: str) -> None:
        backend = await self.backend()
        self.finish_json(await self.run(lambda: self.view(backend.get(job_id), points=True)))

    @web.authenticated
    async def delete(self, job_id: str) -> None:
        backend = await self.backend()
        self.finish_json(await self.run(lambda: self.view(backend.cancel(job_id), points=False)))


class CancelHandler(_JobsBase):
    @web.authenticated
    async def post(self, job_id: str) -> None:
        backend = await self.backend()
        self.finish_json(await self.run(lambda: self.view(backend.cancel(job_id), points=False)))


class PreemptHandler(_JobsBase):
    """The preemption drill of ``starverse jobs preempt``: what the backend sends on a real preemption."""

    @web.authenticated
    async def post(self, job_id: str) -> None:
        backend = await self.backend()
        self.finish_json(await self.run(lambda: self.view(backend.preempt(job_id), points=False)))


class LogsHandler(_JobsBase):
    @web.authenticated
    async def get(self, job_id: str) -> None:
        backend = await self.backend()
        tail = _int_arg(self.query("tail"), "tail", default=200, low=1, high=_MAX_TAIL)
        rank = _int_arg(self.query("rank"), "rank", default=None, low=0, high=1 << 20)
        follow = (self.query("follow") or "").lower() in ("1", "true", "yes")
        await self.run(backend.get, job_id)  # unknown id -> 404 before any streaming starts
        if follow:
            await self._follow(backend, job_id, rank)
            return

        def last() -> LogTail:
            # Read from the ends of the logs, not through them; `tail` lines shared among the
            # ranks (plus each node agent's last 2), or exactly the last `tail` of one rank.
            count = tail or 200
            lines = backend.tail(job_id, lines=count, rank=rank)
            return LogTail(job_id, tuple(lines[-count:] if rank is not None else lines))

        self.finish_json(await self.run(last))

    async def _follow(self, backend: LaunchBackend, job_id: str, rank: int | None) -> None:
        """Stream NDJSON lines until the job ends or the client goes away."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[LogLine | BaseException | None] = asyncio.Queue()
        stop = threading.Event()

        def pump() -> None:
            try:
                for line in backend.logs(job_id, follow=True, rank=rank):
                    loop.call_soon_threadsafe(queue.put_nowait, line)
                    if stop.is_set():
                        return
            except BaseException as exc:  # handed to the event loop, raised there
                loop.call_soon_threadsafe(queue.put_nowait, exc)
            finally:
                loop.call_soon_threadsafe(queue.put_nowait, None)

        threading.Thread(target=pump, name=f"starverse-logs-{job_id}", daemon=True).start()
        self.set_header("Content-Type", "application/x-ndjson")
        self.set_header("Cache-Control", "no-cache")
        try:
            while (item := await queue.get()) is not None:
                if isinstance(item, BaseException):
                    self.log.error("jupyter_starverse: following logs of %s failed", job_id, exc_info=item)
                    self.write(json.dumps({"error": type(item).__name__, "message": str(item)}) + "\n")
                    break
                self.write(json.dumps({"node": item.node, "rank": item.rank, "text": item.text}) + "\n")
                await self.flush()
        except StreamClosedError:
            return
        finally:
            stop.set()
        self.finish()


class PreviewHandler(StarverseHandler):
    """What launching a spec would start, its resume plan and its price: the CLI's ``--dry-run``."""

    @web.authenticated
    async def post(self) -> None:
        body = self.json_body()
        unknown = sorted(set(body) - {"spec", "backend", "output"})
        if unknown or not isinstance(body.get("spec"), dict):
            raise BadInputError(
                "expected a JSON object with 'spec' (a JobSpec) and optionally 'backend' and 'output'",
                field=unknown[0] if unknown else "spec",
                hint='e.g. {"spec": {"name": "run", "script": "train.py", "nodes": 2}, "output": "yaml"}',
            )
        output = body.get("output", "yaml")
        if output not in ("yaml", "json", "sbatch"):
            raise BadInputError(f"output must be 'yaml', 'json' or 'sbatch' (Slurm), got {output!r}", field="output")
        backend = body.get("backend")
        if backend is not None and not isinstance(backend, str):
            raise BadInputError("backend must be a name: 'local', 'kubernetes' or 'slurm'", field="backend")
        spec = await self.run(JobSpec.from_json, body["spec"])  # a 10 MB cell is checked off the loop too
        self.finish_json(await self.run(lambda: self.client.preview(spec, backend=backend, output=output)))


routes: list[tuple[str, type[StarverseHandler]]] = [
    (r"jobs", JobsHandler),
    (r"jobs/preview", PreviewHandler),
    (rf"jobs/{_ID}", JobHandler),
    (rf"jobs/{_ID}/cancel", CancelHandler),
    (rf"jobs/{_ID}/preempt", PreemptHandler),
    (rf"jobs/{_ID}/logs", LogsHandler),
]
