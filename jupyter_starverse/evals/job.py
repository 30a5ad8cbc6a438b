"""What an evaluation job runs: the service on the store the job sees, the table in its log."""

from __future__ import annotations

import json
import sys

from jupyter_starverse._settings import Settings
from jupyter_starverse.catalog import Catalog

from ._run import TaskOptions
from ._service import EvalService

__all__ = ["main"]


def main(params_json: str) -> None:
    params = json.loads(params_json)
    opts = params.get("options") or {}
    options = TaskOptions(**{**opts, "labels": tuple(opts.get("labels") or ())})
    service = EvalService(Settings.from_env(), Catalog(Settings.from_env()))

    def say(p: object) -> None:
        print(p, file=sys.stderr, flush=True)

    run = service.evaluate(
        params["model"],
        params["data"],
        baselines=params.get("baselines") or (),
        task=params.get("task", "classification"),
        input_field=params.get("input_field", "input"),
        target_field=params.get("target_field", "target"),
        options=options,
        limit=params.get("limit"),
        progress=say,
        harness=bool(params.get("harness")),
        harness_task=params.get("harness_task"),
    )
    print(run, flush=True)
    print(json.dumps({"eval_reports": [r.id for r in run.reports]}), flush=True)
