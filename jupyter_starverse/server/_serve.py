"""``/jupyter-starverse/serve``: endpoints of models over REST (the same service as ``starverse serve``).

::

    GET    serve                       -> [Endpoint]  (?all=1: stopped ones too)
    POST   serve  {model, engine?, port?, name?, max_tokens?}  -> Endpoint (201), once it answers
    GET    serve/ID                    -> Endpoint (with its lineage)
    DELETE serve/ID                    -> Endpoint (stopped; its port is free)
    POST   serve/render {model, backend: kubernetes|slurm, gpu?, gpus?, replicas?, engine?}  -> {text}

The endpoint runs in a process of its own (the process service); this handler never owns it.
"""

from __future__ import annotations

from typing import Any

from tornado import web

from jupyter_starverse.errors import BadInputError

from ._base import StarverseHandler

__all__ = ["routes"]

_ID = r"(?P<endpoint_id>[a-z0-9-]{1,100})"


def _field(body: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    value = body.get(key, default)
    if value is default:
        return value
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise BadInputError(f"{key!r} must be {kind.__name__}", field=key, hint=f"send {key} as {kind.__name__}")
    return value


class Rendered:
    def __init__(self, text: str, backend: str) -> None:
        self.text, self.backend = text, backend

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "text": self.text}


class EndpointsHandler(StarverseHandler):
    @web.authenticated
    async def get(self) -> None:
        everything = self.query("all") in ("1", "true", "yes")
        self.finish_json(await self.run(lambda: self.client.serve.ls(all=everything)))

    @web.authenticated
    async def post(self) -> None:
        body = self.json_body()
        model = _field(body, "model", str, None)
        if not model:
            raise BadInputError("'model' is required", field="model", hint="e.g. hf:ORG/REPO@REV")
        kwargs = {
            "engine": _field(body, "engine", str, "auto"),
            "port": _field(body, "port", int, 0),
            "name": _field(body, "name", str, None),
            "max_tokens": _field(body, "max_tokens", int, 512),
        }
        ep = await self.run(lambda: self.client.serve.start(model, **kwargs))
        self.finish_json(ep, status=201)


class EndpointHandler(StarverseHandler):
    @web.authenticated
    async def get(self, endpoint_id: str) -> None:
        self.finish_json(await self.run(self.client.serve.get, endpoint_id))

    @web.authenticated
    async def delete(self, endpoint_id: str) -> None:
        self.finish_json(await self.run(self.client.serve.stop, endpoint_id))


class RenderHandler(StarverseHandler):
    @web.authenticated
    async def post(self) -> None:
        body = self.json_body()
        model = _field(body, "model", str, None)
        backend = _field(body, "backend", str, "kubernetes")
        if not model:
            raise BadInputError("'model' is required", field="model", hint="e.g. hf:ORG/REPO@REV")
        if backend not in ("kubernetes", "slurm"):
            raise BadInputError("backend must be kubernetes or slurm", field="backend", hint="e.g. kubernetes")
        kwargs = {
            "engine": _field(body, "engine", str, "auto"),
            "accelerator": _field(body, "gpu", str, "cpu"),
            "gpus": _field(body, "gpus", int, 1),
            "replicas": _field(body, "replicas", int, 1),
        }

        def render() -> Rendered:
            spec = self.client.serve.spec(model, **kwargs)
            out = "sbatch" if backend == "slurm" else "yaml"
            return Rendered(self.client.serve.render(spec, self.client.backend(backend), output=out), backend)

        self.finish_json(await self.run(render))


routes = [
    ("serve", EndpointsHandler),
    ("serve/render", RenderHandler),
    (f"serve/{_ID}", EndpointHandler),
]
