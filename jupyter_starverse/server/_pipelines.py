"""``/jupyter-starverse/pipelines``: check, price, export and run a ``.svpipeline`` document.

| verb | path                        | body / answer                                                     |
|------|-----------------------------|-------------------------------------------------------------------|
| POST | pipelines/validate          | ``{"pipeline", "path"?}`` -> ``PipelineCheck`` (issues per node, cost) |
| POST | pipelines/cost              | same body -> ``PipelineCheck`` (its ``costs`` and ``total``)       |
| POST | pipelines/export            | ``{"pipeline", "path"?, "format", "write"?}`` -> ``PipelineExport``|
| POST | pipelines/run               | ``{"pipeline", "path"?, "backend"?}`` -> ``PipelineRun`` (detached)|
| GET  | pipelines/runs              | ``[PipelineRun]`` newest first                                     |
| GET  | pipelines/runs/ID           | ``PipelineRun``: every node's live state and job id                |
| POST | pipelines/runs/ID/cancel    | ``PipelineRun`` after cancelling its jobs                          |

``path`` is the document's path relative to the server's root: relative script paths of its
steps are read from its folder, and ``write`` puts the exported files in ``<stem>-<format>/``
beside it. The body's ``pipeline`` is the document as the editor holds it (saved or not).
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

from tornado import web

from jupyter_starverse._inputs import NAME_MAX, check_path
from jupyter_starverse.errors import BadInputError, PermissionDeniedError
from jupyter_starverse.pipelines import EXPORT_FORMATS, Pipeline

from ._base import StarverseHandler

__all__ = ["routes"]

_RUN = r"(?P<run_id>[a-z0-9][a-z0-9._-]{0,127})"
_KEYS = {"pipeline", "path", "format", "write", "backend"}


class _PipelineHandler(StarverseHandler):
    def root(self) -> Path:
        return Path(self.settings.get("server_root_dir") or ".").expanduser().resolve()

    def document(self, body: dict[str, Any]) -> tuple[Pipeline, Path, PurePosixPath | None]:
        """The pipeline of the body, the folder its relative paths are read from, its path."""
        unknown = sorted(set(body) - _KEYS)
        if unknown or not isinstance(body.get("pipeline"), dict):
            raise BadInputError(
                "expected a JSON object with 'pipeline' (the .svpipeline document) and optionally 'path'",
                field=unknown[0] if unknown else "pipeline",
                hint='e.g. {"pipeline": {"version": 1, "name": "sft", "nodes": [], "edges": []}, "path": "a.svpipeline"}',  # noqa: E501
            )
        pipeline = Pipeline.from_json(body["pipeline"])
        raw = body.get("path")
        if raw is None:
            return pipeline, self.root(), None
        hint = "the .svpipeline file's path relative to the server root, e.g. work/sft.svpipeline"
        if not isinstance(raw, str):
            raise BadInputError("path must be the document's path relative to the server root", field="path", hint=hint)
        check_path(raw, "path", hint=hint)
        rel = PurePosixPath(raw.lstrip("/"))
        if len(rel.stem.encode()) > NAME_MAX - 16:  # export writes <stem>-<format>/ beside it
            raise BadInputError(f"the file name {rel.name!r} is too long to export beside", field="path", hint=hint)
        folder = (self.root() / rel.parent).resolve()
        if folder != self.root() and self.root() not in folder.parents:
            raise PermissionDeniedError(f"{raw!r} is outside the server's root", hint="open a file under the root")
        return pipeline, folder, rel


class ValidateHandler(_PipelineHandler):
    @web.authenticated
    async def post(self) -> None:
        body = self.json_body()

        def work() -> Any:  # parsing 200 nodes and checking each: seconds, in the pool of long calls
            pipeline, base, _ = self.document(body)
            return self.client.pipelines.check(pipeline, base_dir=base)

        self.finish_json(await self.run_heavy(work))


class ExportHandler(_PipelineHandler):
    @web.authenticated
    async def post(self) -> None:
        body = self.json_body()
        fmt = body.get("format", "sbatch")
        if fmt not in EXPORT_FORMATS:
            raise BadInputError(f"format must be one of {', '.join(EXPORT_FORMATS)}, got {fmt!r}", field="format")
        write = body.get("write", False)
        if not isinstance(write, bool):
            raise BadInputError("write must be true or false", field="write")

        def work() -> Any:
            pipeline, base, rel = self.document(body)
            result = self.client.pipelines.export(pipeline, fmt, base_dir=base)
            if not write:
                return result
            stem = rel.stem if rel is not None else "pipeline"
            done = result.write(base / f"{stem}-{fmt}")
            # paths relative to the root, as the file browser opens them
            written = tuple(str(Path(p).relative_to(self.root())) for p in done.written)
            return type(done)(done.name, done.format, done.files, written)

        self.finish_json(await self.run_heavy(work))


class RunHandler(_PipelineHandler):
    @web.authenticated
    async def post(self) -> None:
        body = self.json_body()
        backend = body.get("backend")
        if backend is not None and not isinstance(backend, str):
            raise BadInputError("backend must be a name: 'local', 'kubernetes' or 'slurm'", field="backend")

        def work() -> Any:
            pipeline, base, _ = self.document(body)
            return self.client.pipelines.run(pipeline, base_dir=base, wait=False, backend=backend)

        self.finish_json(await self.run_heavy(work))


class RunsHandler(_PipelineHandler):
    @web.authenticated
    async def get(self) -> None:
        self.finish_json(await self.run(self.client.pipelines.runs))


class RunStatusHandler(_PipelineHandler):
    @web.authenticated
    async def get(self, run_id: str) -> None:
        self.finish_json(await self.run(self.client.pipelines.status, run_id))


class RunCancelHandler(_PipelineHandler):
    @web.authenticated
    async def post(self, run_id: str) -> None:
        self.finish_json(await self.run(self.client.pipelines.cancel, run_id))


routes: list[tuple[str, type[StarverseHandler]]] = [
    (r"pipelines/validate", ValidateHandler),
    (r"pipelines/cost", ValidateHandler),
    (r"pipelines/export", ExportHandler),
    (r"pipelines/run", RunHandler),
    (r"pipelines/runs", RunsHandler),
    (rf"pipelines/runs/{_RUN}", RunStatusHandler),
    (rf"pipelines/runs/{_RUN}/cancel", RunCancelHandler),
]
