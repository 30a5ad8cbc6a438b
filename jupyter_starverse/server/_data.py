"""``/jupyter-starverse/data``: data steps and their reports for the side panel.

| verb | path                              | body / query                          | answer              |
|------|-----------------------------------|---------------------------------------|---------------------|
| GET  | data/reports                      |                                       | ``[ReportSummary]`` |
| GET  | data/report?id=ID                 |                                       | ``DataReport``      |
| GET  | data/report/html?id=ID            |                                       | ``{id, html}``      |
| GET  | data/preview?id=ID&threshold=T    |                                       | ``{id, threshold, removed}`` |
| POST | data/estimate                     | ``{step, source, text_field?}``       | ``StepEstimate``    |
| POST | data/steps                        | ``{step, source, to?, options?}``     | ``DataReport`` (201)|

A step runs in a server thread (the event loop stays free) and answers when it is done;
``options`` are the keyword arguments of the step (``threshold``, ``actions``, ``salt`` as a
reference, ``min_quality``...); unknown ones are refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tornado import web

from jupyter_starverse.data import STEPS
from jupyter_starverse.errors import BadInputError

from ._base import StarverseHandler

__all__ = ["routes"]

_NUM = (int, float)
# What each step accepts from a request body, and the JSON types allowed.
_OPTIONS: dict[str, dict[str, tuple[type, ...]]] = {
    "scan": {"types": (list,), "examples": (int,), "shards": (list,)},
    "clean": {"actions": (dict,), "salt": (str,), "examples": (int,), "shards": (list,)},
    "dedup": {
        "shards": (list,),
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
class ReportPage:
    id: str
    html: str

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "html": self.html}


@dataclass(frozen=True)
class ThresholdPreview:
    id: str
    threshold: float
    removed: int

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "threshold": self.threshold, "removed": self.removed}


def _text(body: dict[str, Any], key: str, *, required: bool = False) -> str | None:
    value = body.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise BadInputError(f"{key!r} must be a non-empty string", field=key)
    return value


def _step(body: dict[str, Any]) -> str:
    step = _text(body, "step", required=True)
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
    if "shards" in out:
        shards = out["shards"]
        if len(shards) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in shards):
            raise BadInputError("'shards' is [nodes, procs_per_node]", field="shards", hint="e.g. [2, 2]")
        out["shards"] = (shards[0], shards[1])
    return out


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
        source = _text(body, "source", required=True)
        text_field = _text(body, "text_field") or "text"
        self.finish_json(await self.run(self.client.data.estimate, step, source, text_field=text_field))


class StepsHandler(StarverseHandler):
    @web.authenticated
    async def post(self) -> None:
        body = self.json_body()
        step = _step(body)
        source = _text(body, "source", required=True)
        kwargs = _options(step, body.get("options"))
        text_field = _text(body, "text_field")
        if text_field:
            kwargs["text_field"] = text_field
        to = _text(body, "to")
        if step != "scan" and to:
            kwargs["to"] = to
        report = await self.run(getattr(self.client.data, step), source, **kwargs)
        self.finish_json(report, status=201)


routes: list[tuple[str, type[StarverseHandler]]] = [
    (r"data/reports", ReportsHandler),
    (r"data/report", ReportHandler),
    (r"data/report/html", ReportHtmlHandler),
    (r"data/preview", PreviewHandler),
    (r"data/estimate", EstimateHandler),
    (r"data/steps", StepsHandler),
]
