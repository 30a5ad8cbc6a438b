"""``/jupyter-starverse/data``: data steps and their reports for the side panel.

| verb | path                              | body / query                          | answer              |
|------|-----------------------------------|---------------------------------------|---------------------|
| GET  | data/reports                      |                                       | ``[ReportSummary]`` |
| GET  | data/report?id=ID                 |                                       | ``DataReport``      |
| GET  | data/report/html?id=ID            |                                       | ``{id, html}``      |
| GET  | data/preview?id=ID&threshold=T    |                                       | ``{id, threshold, removed}`` |
| POST | data/estimate                     | ``{step, source, text_field?}``       | ``StepEstimate``    |
| POST | data/steps                        | ``{step, source, to?, options?}``     | ``StepRun`` (202)   |
| GET  | data/steps/ID                     |                                       | ``StepRun``         |

``POST data/steps`` checks the body, starts the step in a background thread of the server and
answers ``202`` at once with the run's id; ``GET data/steps/ID`` says how far it is (``state``
running | succeeded | failed | interrupted, a :class:`StepProgress` with documents, bytes and
ETA), the ``report_id`` once it succeeded, or the error's text and hint. ``options`` are the
keyword arguments of the step (``threshold``, ``actions``, ``salt`` as a reference,
``min_quality``...); unknown ones are refused. Each run's state is also kept on the store
(``prepared/_steps/ID.json``, temp + rename), so after a server restart a run that was cut
short reads ``interrupted`` (start it again) instead of vanishing.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tornado import web

from jupyter_starverse.data import STEPS, DataPrep, StepProgress, parse_shards
from jupyter_starverse.errors import BadInputError, NotFoundError, StarverseError

from ._base import FieldsAnswer, StarverseHandler, body_text

__all__ = ["STEP_RUNS", "StepRun", "StepRuns", "routes"]

_NUM = (int, float)
# What each step accepts from a request body, and the JSON types allowed.
_OPTIONS: dict[str, dict[str, tuple[type, ...]]] = {
    "scan": {"types": (list,), "examples": (int,), "shards": (list, str, int)},
    "clean": {"actions": (dict,), "salt": (str,), "examples": (int,), "shards": (list, str, int)},
    "dedup": {
        "shards": (list, str, int),
        "threshold": _NUM,
        "lsh_threshold": _NUM,
        "num_perm": (int,),
        "ngram": (int,),
        "paragraph_share": (*_NUM, type(None)),
        "semantic_model": (str,),
        "semantic_threshold": _NUM,
        "max_memory": (int,),
    },
    "score": {
        "min_quality": (*_NUM, type(None)),
        "lm": (str,),
        "max_perplexity": _NUM,
        "encoder": (str,),
        "examples": (list,),
        "min_relevance": _NUM,
    },
}


@dataclass(frozen=True)
class ReportPage(FieldsAnswer):
    id: str
    html: str


@dataclass(frozen=True)
class ThresholdPreview(FieldsAnswer):
    id: str
    threshold: float
    removed: int


def _step(body: dict[str, Any]) -> str:
    step = body_text(body, "step", required=True)
    if step not in STEPS:
        raise BadInputError(f"unknown step {step!r}", field="step", hint=f"steps: {', '.join(STEPS)}")
    return step


def _options(step: str, raw: object) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise BadInputError("'options' must be an object", field="options")
    allowed = _OPTIONS[step]
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in allowed:
            raise BadInputError(
                f"{step} has no option {key!r}", field="options", hint=f"options: {', '.join(sorted(allowed))}"
            )
        if isinstance(value, bool) or not isinstance(value, allowed[key]):
            raise BadInputError(f"option {key!r} has the wrong type", field=key)
        out[key] = value
    if "shards" in out and not isinstance(out["shards"], list):  # "N" or "NxP", as the CLI and a node take it
        out["shards"] = parse_shards(out["shards"], step=step)
    elif "shards" in out:
        shards = out["shards"]
        if len(shards) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in shards):
            raise BadInputError("'shards' is [nodes, procs_per_node]", field="shards", hint="e.g. [2, 2]")
        out["shards"] = (shards[0], shards[1])
    return out


_RUN_ID = r"(?P<run_id>[a-z0-9][a-z0-9._-]{0,127})"
_SAVE_EVERY_S = 2.0  # the state file follows the progress at most this often


@dataclass(frozen=True)
class StepRun:
    """A data step started over REST, as ``GET data/steps/ID`` answers it."""

    id: str
    step: str
    source: str
    state: str  # running | succeeded | failed | interrupted
    progress: StepProgress
    started_at: float
    finished_at: float | None = None
    report_id: str | None = None
    output: str | None = None
    error: dict[str, Any] | None = None  # {error, message, hint}

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "step": self.step,
            "source": self.source,
            "state": self.state,
            "progress": self.progress.to_json(),
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "report_id": self.report_id,
            "output": self.output,
            "error": self.error,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StepRun:
        fields = StepProgress.__dataclass_fields__
        progress = StepProgress(**{k: v for k, v in data["progress"].items() if k in fields})
        fields_: dict[str, Any] = {k: data.get(k) for k in cls.__dataclass_fields__}
        fields_["progress"] = progress
        return cls(**fields_)


class StepRuns:
    """The steps this server runs in background threads, and their state files on the store."""

    def __init__(self) -> None:
        self._live: dict[str, StepRun] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _folder(data: DataPrep) -> Path:
        return data.prepared / "_steps"

    def _save(self, folder: Path, run: StepRun) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{run.id}.{os.getpid()}.{threading.get_ident()}.tmp"
        tmp.write_text(json.dumps(run.to_json(), ensure_ascii=False), encoding="utf-8")
        tmp.replace(folder / f"{run.id}.json")

    def start(self, data: DataPrep, step: str, source: str, kwargs: dict[str, Any], log: Any) -> StepRun:
        """Start ``step`` on ``source`` in a thread; its first state (already on the store)."""
        run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{step}-{secrets.token_hex(3)}"
        folder = self._folder(data)
        run = StepRun(run_id, step, source, "running", StepProgress(step, "starting"), time.time())
        self._save(folder, run)
        with self._lock:
            self._live[run_id] = run
        saved = time.monotonic()

        def update(**changes: Any) -> StepRun:
            with self._lock:
                self._live[run_id] = new = replace(self._live[run_id], **changes)
            return new

        def progress(p: StepProgress) -> None:
            nonlocal saved
            new = update(progress=p)
            if time.monotonic() - saved >= _SAVE_EVERY_S:
                saved = time.monotonic()
                self._save(folder, new)

        def work() -> None:
            try:
                report = getattr(data, step)(source, progress=progress, **kwargs)
                done = update(state="succeeded", report_id=report.id, output=report.output, finished_at=time.time())
            except Exception as e:  # the run's answer, not the server's: kept for GET data/steps/ID
                if isinstance(e, StarverseError):
                    error = {"error": type(e).__name__, "message": e.message, "hint": e.hint}
                else:
                    log.error("jupyter_starverse: data step %s failed", run_id, exc_info=e)
                    error = {"error": type(e).__name__, "message": str(e) or repr(e), "hint": "see the server log"}
                done = update(state="failed", error=error, finished_at=time.time())
            self._save(folder, done)

        threading.Thread(target=work, name=f"starverse-data-{run_id}", daemon=True).start()
        return run

    def get(self, data: DataPrep, run_id: str) -> StepRun:
        """The run's state: live from this server, else from its file (``interrupted`` if it was cut short)."""
        with self._lock:
            live = self._live.get(run_id)
        if live is not None:
            return live
        path = self._folder(data) / f"{run_id}.json"
        try:
            run = StepRun.from_json(json.loads(path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise NotFoundError(f"no data step run {run_id!r}", hint="POST data/steps starts one") from None
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise NotFoundError(f"data step run {run_id!r} is unreadable: {e}", hint="start the step again") from None
        if run.state == "running":  # its thread belonged to a server that is gone
            error = {
                "error": "Interrupted",
                "message": f"the server stopped while {run.step} of {run.source} ran; nothing was published",
                "hint": "start the step again",
            }
            run = replace(run, state="interrupted", error=error)
        return run


#: One per server process.
STEP_RUNS = StepRuns()


class _ReportId(StarverseHandler):
    def _id(self) -> str:
        value = self.query("id")
        if not value:
            raise BadInputError("query argument 'id' is required", field="id", hint="GET data/reports lists them")
        return value


class ReportsHandler(StarverseHandler):
    @web.authenticated
    async def get(self) -> None:
        self.finish_json(list((await self.run(self.client.data.reports)).reports))


class ReportHandler(_ReportId):
    @web.authenticated
    async def get(self) -> None:
        self.finish_json(await self.run(self.client.data.report, self._id()))


class ReportHtmlHandler(_ReportId):
    @web.authenticated
    async def get(self) -> None:
        report_id = self._id()
        self.finish_json(ReportPage(report_id, await self.run(self.client.data.report_html, report_id)))


class PreviewHandler(_ReportId):
    @web.authenticated
    async def get(self) -> None:
        report_id = self._id()
        raw = self.query("threshold")
        try:
            threshold = float(raw) if raw is not None else float("nan")
        except ValueError:
            threshold = float("nan")
        if not 0.0 < threshold <= 1.0:
            raise BadInputError("threshold must be a number in (0, 1]", field="threshold", hint="e.g. ?threshold=0.8")
        report = await self.run(self.client.data.report, report_id)
        self.finish_json(ThresholdPreview(report_id, threshold, report.removed_at(threshold)))


class EstimateHandler(StarverseHandler):
    @web.authenticated
    async def post(self) -> None:
        body = self.json_body()
        step = _step(body)
        source = body_text(body, "source", required=True)
        text_field = body_text(body, "text_field") or "text"
        # a timed sample of the corpus: seconds, in the pool of long calls
        self.finish_json(await self.run_heavy(self.client.data.estimate, step, source, text_field=text_field))


class StepsHandler(StarverseHandler):
    @web.authenticated
    async def post(self) -> None:
        body = self.json_body()
        step = _step(body)
        source = body_text(body, "source", required=True)
        kwargs = _options(step, body.get("options"))
        text_field = body_text(body, "text_field")
        if text_field:
            kwargs["text_field"] = text_field
        to = body_text(body, "to")
        if step != "scan" and to:
            kwargs["to"] = to
        data = self.client.data
        assert source is not None
        backend = body_text(body, "backend")
        if backend:  # the whole step as one job there: the same facade call as `starverse data STEP --backend`
            shards = kwargs.pop("shards", (1, 1))
            to = kwargs.pop("to", None)
            job = await self.run(self.client.data_job, step, source, to=to, options=kwargs, shards=shards,
                                 backend=backend)  # fmt: skip
            self.finish_json(job, status=202)
            return
        await self.run(data.check, source, text_field=text_field)  # a bad source is a 400, not a failed run
        run = await self.run(STEP_RUNS.start, data, step, source, kwargs, self.log)
        self.set_header("Location", self.request.path.rstrip("/") + "/" + run.id)
        self.finish_json(run, status=202)


class StepRunHandler(StarverseHandler):
    @web.authenticated
    async def get(self, run_id: str) -> None:
        self.finish_json(await self.run(STEP_RUNS.get, self.client.data, run_id))


routes: list[tuple[str, type[StarverseHandler]]] = [
    (r"data/reports", ReportsHandler),
    (r"data/report", ReportHandler),
    (r"data/report/html", ReportHtmlHandler),
    (r"data/preview", PreviewHandler),
    (r"data/estimate", EstimateHandler),
    (r"data/steps", StepsHandler),
    (rf"data/steps/{_RUN_ID}", StepRunHandler),
]
