"""``/jupyter-starverse/export``: exports started from the panel, with their reports.

::

    GET  export                                                  -> [ExportTask]
    POST export  {model, format, target?, feedback?, force?}      -> ExportTask (202)
    POST export  {model, format: "tensorrt-llm", gpu, dry_run?}   -> LaunchPreview / Job (201);
                                                                     503 without a GPU
    GET  export/ID                                               -> ExportTask

An ONNX export runs in a server thread (about ten seconds for a small model, minutes for a
large one); its ``phase`` says what it does now and ``result`` holds the report when done.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from tornado import web

from jupyter_starverse.client import Starverse
from jupyter_starverse.errors import BadInputError, NotFoundError, StarverseError
from jupyter_starverse.export import FORMATS, GPU_FORMATS, ExportResult

from ._base import StarverseHandler

__all__ = ["ExportTask", "routes"]


@dataclass
class ExportTask:
    """One export started through the server."""

    id: str
    model: str
    format: str
    state: str = "running"  # running | ok | failed | overridden | error
    phase: str = "starting"
    started: float = field(default_factory=time.time)
    result: ExportResult | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "model": self.model,
            "format": self.format,
            "state": self.state,
            "phase": self.phase,
            "started": self.started,
            "result": self.result.to_json() if self.result else None,
            "error": self.error,
        }


class _Tasks:
    _lock = threading.Lock()
    tasks: dict[str, ExportTask] = {}

    @classmethod
    def start(cls, client: Starverse, body: dict[str, Any]) -> ExportTask:
        task = ExportTask(uuid.uuid4().hex[:12], body["model"], body["format"])

        def say(text: str) -> None:
            task.phase = text

        def work() -> None:
            try:
                task.result = client.export.export(
                    body["model"], body["format"], target=body.get("target"), feedback=body.get("feedback"),
                    force=bool(body.get("force")), progress=say,
                )  # fmt: skip
                task.state, task.phase = task.result.state, "done"
            except StarverseError as e:
                task.state, task.phase, task.error = "error", "done", str(e)
            except Exception as e:  # shown in the panel rather than lost in a thread
                task.state, task.phase, task.error = "error", "done", f"{type(e).__name__}: {e}"

        with cls._lock:
            cls.tasks[task.id] = task
        threading.Thread(target=work, name=f"starverse-export-{task.id}", daemon=True).start()
        return task


def _body(raw: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("model", "format", "target", "feedback", "gpu"):
        value = raw.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise BadInputError(f"{key!r} must be a non-empty string", field=key, hint=f"send {key} as text")
        out[key] = value
    if not out["model"]:
        raise BadInputError("'model' is required", field="model", hint="hf:ORG/REPO@REV, exp:NAME or a folder")
    out["format"] = out["format"] or "onnx"
    if out["format"] not in (*FORMATS, *GPU_FORMATS):
        raise BadInputError(
            f"unknown format {out['format']!r}", field="format", hint=f"one of {', '.join([*FORMATS, *GPU_FORMATS])}"
        )
    for key in ("force", "dry_run"):
        if not isinstance(raw.get(key, False), bool):
            raise BadInputError(f"{key!r} must be true or false", field=key, hint="send a JSON boolean")
        out[key] = bool(raw.get(key, False))
    return out


class ExportsHandler(StarverseHandler):
    @web.authenticated
    async def get(self) -> None:
        self.finish_json(sorted(_Tasks.tasks.values(), key=lambda t: -t.started))

    @web.authenticated
    async def post(self) -> None:
        body = _body(self.json_body())
        if body["format"] in GPU_FORMATS:
            spec = await self.run(self.client.export.tensorrt_spec, body["model"], gpu=body["gpu"])
            if body["dry_run"]:
                self.finish_json(await self.run(self.client.preview, spec))
            else:
                self.finish_json(await self.run(self.client.launch, spec), status=201)
            return
        await self.run(self.client.export.check, body["model"], body["format"], target=body["target"])
        self.finish_json(_Tasks.start(self.client, body), status=202)


class ExportHandler(StarverseHandler):
    @web.authenticated
    async def get(self, task_id: str) -> None:
        task = _Tasks.tasks.get(task_id)
        if task is None:
            raise NotFoundError(f"no export {task_id!r} on this server", hint="list them with GET export")
        self.finish_json(task)


routes: list[tuple[str, type[StarverseHandler]]] = [
    (r"export", ExportsHandler),
    (r"export/(?P<task_id>[A-Za-z0-9]{1,64})", ExportHandler),
]
