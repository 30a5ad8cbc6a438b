"""``/jupyter-starverse/recipes*``: the recipe catalog, and a recipe previewed or launched as a job.

| verb | path                     | body                                                        | answer          |
|------|--------------------------|-------------------------------------------------------------|-----------------|
| GET  | recipes                  |                                                             | ``RecipeList``  |
| GET  | recipes/NAME             |                                                             | ``RecipeInfo``  |
| POST | recipes/NAME/preview     | ``{"model", "data": [..], "params"?: {..}, "job"?: {..}}``  | ``LaunchPreview``|
| POST | recipes/NAME/launch      | the same                                                    | ``Job``         |
| POST | recipes/publish          | ``{"job_id", "repo"}``                                      | ``Entry``       |

``job`` holds JobSpec fields (``nodes``, ``procs_per_node``, ``accelerator``, ``template``,
``steps``, ``experiment``, ``resume``, ``budget``, ...); what to run comes from the recipe.
"""

from __future__ import annotations

from typing import Any

from tornado import web

from jupyter_starverse._inputs import check_path
from jupyter_starverse.errors import BadInputError
from jupyter_starverse.jobmodel import JobSpec

from ._base import StarverseHandler

__all__ = ["routes"]

_NAME = r"(?P<name>[a-z0-9][a-z0-9._-]{0,63})"
_NOT_JOB = ("script", "code", "command", "args", "mounts")
_BODY = 'send {"model": "hf:ORG/NAME", "data": ["DATASET"], "params": {}, "job": {}}'
_JOB_FIELDS = tuple(f for f in JobSpec.__dataclass_fields__ if f not in _NOT_JOB)


class ListHandler(StarverseHandler):
    @web.authenticated
    async def get(self) -> None:
        self.finish_json(await self.run(self.client.recipes.ls))


class ShowHandler(StarverseHandler):
    @web.authenticated
    async def get(self, name: str) -> None:
        self.finish_json(await self.run(self.client.recipes.show, name))


class _SpecHandler(StarverseHandler):
    def spec(self, name: str) -> JobSpec:
        body = self.json_body()
        unknown = sorted(set(body) - {"model", "data", "params", "job", "small"})
        if unknown:
            raise BadInputError(f"unknown field(s) {', '.join(unknown)}", field=unknown[0], hint=_BODY)
        data = body.get("data")
        data = [data] if isinstance(data, str) else data
        params, job = body.get("params") or {}, body.get("job") or {}
        if not isinstance(data, list) or not isinstance(params, dict) or not isinstance(job, dict):
            raise BadInputError("data must be a list of datasets, params and job objects", field="data")
        bad = sorted(set(job) - set(_JOB_FIELDS))
        if bad:
            raise BadInputError(
                f"job: unknown or fixed field(s) {', '.join(bad)}",
                field=bad[0],
                hint=f"job fields: {', '.join(_JOB_FIELDS)}",
            )
        fields: dict[str, Any] = JobSpec.from_json({"name": "x", "code": "x", **job}).to_json()  # types checked
        fields = {k: v for k, v in fields.items() if k in job}
        return self.client.recipes.spec(
            name,
            model=str(body.get("model") or ""),
            data=tuple(data),
            params=params,
            small=bool(body.get("small")),
            **fields,
        )


class PreviewHandler(_SpecHandler):
    @web.authenticated
    async def post(self, name: str) -> None:
        spec = await self.run(self.spec, name)
        self.finish_json(await self.run(self.client.preview, spec))


class LaunchHandler(_SpecHandler):
    @web.authenticated
    async def post(self, name: str) -> None:
        spec = await self.run(self.spec, name)
        self.finish_json(await self.run(self.client.launch, spec), status=201)


class PublishHandler(StarverseHandler):
    @web.authenticated
    async def post(self) -> None:
        body = self.json_body()
        job_id, repo = body.get("job_id"), body.get("repo")
        if not isinstance(job_id, str) or not isinstance(repo, str):
            raise BadInputError("expected {'job_id': ..., 'repo': 'ORG/NAME@VERSION'}", field="job_id")
        check_path(job_id, "job_id", hint="the id of a finished recipe job (`starverse jobs ls`)")
        check_path(repo, "repo", hint="ORG/NAME@VERSION, each part a short name")
        job = await self.run(self.client.attach, job_id)
        self.finish_json(await self.run(self.client.recipes.publish, job, repo=repo))


routes: list[tuple[str, type[StarverseHandler]]] = [
    ("recipes", ListHandler),
    ("recipes/publish", PublishHandler),
    (f"recipes/{_NAME}/preview", PreviewHandler),
    (f"recipes/{_NAME}/launch", LaunchHandler),
    (f"recipes/{_NAME}", ShowHandler),
]
