"""``/jupyter-starverse/jobs``: list, live state, logs (tail or follow), cancel, TensorBoard.

| verb   | path                        | answer                                             |
|--------|-----------------------------|----------------------------------------------------|
| GET    | jobs[?backend=]             | ``[JobView]`` newest first (progress without points)|
| GET    | jobs/ID                     | ``JobView`` with the metric series                 |
| DELETE | jobs/ID                     | cancel; the ``JobView`` after it                   |
| POST   | jobs/ID/cancel              | same as DELETE                                     |
| GET    | jobs/ID/logs?tail=&rank=    | ``LogTail``; ``follow=1`` streams NDJSON lines     |
| GET    | jobs/ID/tensorboard         | ``TensorBoardInfo``                                |
| POST   | jobs/preview                | ``LaunchPreview`` of body ``{"spec", "backend"?, "output"?}`` |

A job's truth is its backend (experiment folder or cluster), so after a server restart
every route answers as before.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tornado import web
from tornado.iostream import StreamClosedError

from jupyter_starverse.errors import BadInputError
from jupyter_starverse.experiments import RunPaths
from jupyter_starverse.jobmodel import Job, JobSpec, LaunchBackend, LogLine
from jupyter_starverse.watch import JobProgress

from ._base import StarverseHandler, parse_int

__all__ = ["JobView", "LogTail", "TensorBoardInfo", "routes", "tensorboard_info"]

_MAX_TAIL = 5000
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


@dataclass(frozen=True)
class TensorBoardInfo:
    """Where a job's TensorBoard events are and how to look at them."""

    job_id: str
    logdir: str
    has_events: bool
    installed: bool
    command: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "logdir": self.logdir,
            "has_events": self.has_events,
            "installed": self.installed,
            "command": list(self.command),
        }


def tensorboard_info(job: Job) -> TensorBoardInfo:
    """TensorBoard log folder of ``job`` (``TENSORBOARD_LOGDIR`` of its ranks) and its state."""
    logdir = RunPaths(Path(job.experiment_dir)).tensorboard
    has_events = logdir.is_dir() and any(p.name.startswith("events.out.tfevents") for p in logdir.rglob("*"))
    installed = shutil.which("tensorboard") is not None
    return TensorBoardInfo(job.id, str(logdir), has_events, installed, ("tensorboard", "--logdir", str(logdir)))


def _int_arg(value: str | None, name: str, *, default: int | None, low: int, high: int) -> int | None:
    return parse_int(value, name, default=default, low=low, high=high)


class _JobsBase(StarverseHandler):
    def backend(self) -> LaunchBackend:
        return self.client.backend(self.query("backend"))

    def view(self, job: Job, *, points: bool) -> JobView:
        # The facade keeps one watch per job, so a poll reads only the new metric lines.
        watch = self.client.watch(job.id, backend=job.backend)
        return JobView(job, watch.progress(job=job), points)


class JobsHandler(_JobsBase):
    @web.authenticated
    async def get(self) -> None:
        backend = self.backend()

        def views() -> list[JobView]:
            return [self.view(job, points=False) for job in backend.list()]

        self.finish_json(await self.run(views))


class JobHandler(_JobsBase):
    @web.authenticated
    async def get(self, job_id: str) -> None:
        backend = self.backend()
        self.finish_json(await self.run(lambda: self.view(backend.get(job_id), points=True)))

    @web.authenticated
    async def delete(self, job_id: str) -> None:
        backend = self.backend()
        self.finish_json(await self.run(lambda: self.view(backend.cancel(job_id), points=False)))


class CancelHandler(_JobsBase):
    @web.authenticated
    async def post(self, job_id: str) -> None:
        backend = self.backend()
        self.finish_json(await self.run(lambda: self.view(backend.cancel(job_id), points=False)))


class LogsHandler(_JobsBase):
    @web.authenticated
    async def get(self, job_id: str) -> None:
        backend = self.backend()
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


class TensorBoardHandler(_JobsBase):
    @web.authenticated
    async def get(self, job_id: str) -> None:
        backend = self.backend()
        self.finish_json(await self.run(lambda: tensorboard_info(backend.get(job_id))))


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
            raise BadInputError(
                f"output must be 'yaml', 'json' or 'sbatch' (Slurm), got {output!r}", field="output"
            )
        backend = body.get("backend")
        if backend is not None and not isinstance(backend, str):
            raise BadInputError("backend must be a name: 'local', 'kubernetes' or 'slurm'", field="backend")
        spec = JobSpec.from_json(body["spec"])
        self.finish_json(await self.run(lambda: self.client.preview(spec, backend=backend, output=output)))


routes: list[tuple[str, type[StarverseHandler]]] = [
    (r"jobs", JobsHandler),
    (r"jobs/preview", PreviewHandler),
    (rf"jobs/{_ID}", JobHandler),
    (rf"jobs/{_ID}/cancel", CancelHandler),
    (rf"jobs/{_ID}/logs", LogsHandler),
    (rf"jobs/{_ID}/tensorboard", TensorBoardHandler),
]
