"""``GET /jupyter-starverse/info``."""

from __future__ import annotations

from tornado import web

from ._base import StarverseHandler

__all__ = ["routes"]


class InfoHandler(StarverseHandler):
    @web.authenticated
    async def get(self) -> None:
        self.finish_json(await self.run(self.client.info))


routes: list[tuple[str, type[StarverseHandler]]] = [(r"info", InfoHandler)]
