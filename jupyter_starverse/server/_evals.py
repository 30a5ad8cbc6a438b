"""``/jupyter-starverse/evals``: evaluation reports, and evaluations run from the panel.

::

    GET  evals?model=M&data=D                                      -> [EvalReport]
    POST evals  {model, data, baselines?, task?, input_field?, target_field?, limit?,
                 harness?, harness_task?}                          -> EvalRun (the reports, side by side)
    GET  evals/ID                                                  -> EvalReport
    GET  evals/ID/errors                                           -> EvalErrors (the examples it got wrong)

A POST runs in the pool of long calls (the same ``client.evals.evaluate`` as the CLI).
``harness: true`` runs the task through lm-evaluation-harness (``--harness``);
``harness_task`` is a team's lm-eval task file (``--harness-task``), given relative to the
server's root and refused outside it, in place of ``data``.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

from tornado import web

from jupyter_starverse._inputs import check_path
from jupyter_starverse.errors import BadInputError, PermissionDeniedError
from jupyter_starverse.evals import TASKS, TaskOptions

from ._base import StarverseHandler

__all__ = ["routes"]


def _text(raw: dict[str, Any], key: str, default: str | None = None) -> str | None:
    value = raw.get(key, default)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise BadInputError(f"{key!r} must be a non-empty string", field=key, hint=f"send {key} as text")
    return value


def _task_file(raw: dict[str, Any], root: Path) -> Path | None:
    """The lm-eval task file named by ``harness_task``, inside the server's root."""
    value = _text(raw, "harness_task")
    if value is None:
        return None
    hint = "the task YAML's path relative to the server root, e.g. evals/mytask.yaml"
    check_path(value, "harness_task", hint=hint)
    path = (root / PurePosixPath(value.lstrip("/"))).resolve()
    if root not in path.parents:
        raise PermissionDeniedError(f"{value!r} is outside the server's root", hint="use a task file under the root")
    return path


def _body(raw: dict[str, Any], root: Path) -> dict[str, Any]:
    model, data = _text(raw, "model"), _text(raw, "data")
    harness, harness_task = raw.get("harness", False), _task_file(raw, root)
    if not isinstance(harness, bool):
        raise BadInputError("'harness' must be true or false", field="harness", hint='"harness": true')
    if not model or not (data or harness_task):
        raise BadInputError("'model' and 'data' are required", field="model" if not model else "data",
                            hint='e.g. {"model": "hf:ORG/REPO@REV", "data": "NAME@1"}')  # fmt: skip
    baselines = raw.get("baselines", [])
    if not isinstance(baselines, list) or not all(isinstance(b, str) and b.strip() for b in baselines):
        raise BadInputError("'baselines' must be a list of model names", field="baselines", hint='["hf:ORG/BASE"]')
    task = _text(raw, "task", "classification")
    if task not in TASKS:
        raise BadInputError(f"unknown task {task!r}", field="task", hint=f"one of {', '.join(TASKS)}")
    limit = raw.get("limit")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 10**7):
        raise BadInputError("'limit' must be a positive integer", field="limit", hint="e.g. 100")
    fields = {"input_field": _text(raw, "input_field", "input"), "target_field": _text(raw, "target_field", "target")}
    return {"model": model, "data": data or "", "baselines": tuple(baselines), "task": task, "limit": limit,
            "harness": harness, "harness_task": harness_task, **fields}  # fmt: skip


class EvalsHandler(StarverseHandler):
    @web.authenticated
    async def get(self) -> None:
        model = self.get_query_argument("model", None) or None
        data = self.get_query_argument("data", None) or None
        self.finish_json(await self.run(self.client.evals.reports, model=model, data=data))

    @web.authenticated
    async def post(self) -> None:
        b = _body(self.json_body(), Path(self.settings.get("server_root_dir") or ".").expanduser().resolve())
        run = await self.run_heavy(
            self.client.evals.evaluate, b["model"], b["data"], baselines=b["baselines"], task=b["task"],
            input_field=b["input_field"], target_field=b["target_field"], options=TaskOptions(task=b["task"]),
            limit=b["limit"], harness=b["harness"], harness_task=b["harness_task"],
        )  # fmt: skip
        self.finish_json(run)


class EvalHandler(StarverseHandler):
    @web.authenticated
    async def get(self, report_id: str) -> None:
        self.finish_json(await self.run(self.client.evals.report, report_id))


class EvalErrorsHandler(StarverseHandler):
    @web.authenticated
    async def get(self, report_id: str) -> None:
        report = await self.run(self.client.evals.report, report_id)
        self.finish_json(await self.run(report.wrong))


routes: list[tuple[str, type[StarverseHandler]]] = [
    (r"evals", EvalsHandler),
    (r"evals/(?P<report_id>[A-Za-z0-9_-]{1,64})", EvalHandler),
    (r"evals/(?P<report_id>[A-Za-z0-9_-]{1,64})/errors", EvalErrorsHandler),
]
