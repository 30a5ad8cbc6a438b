"""``/jupyter-starverse/store``: the catalog for the side panel.

| verb | path                   | body / query                                | answer                        |
|------|------------------------|---------------------------------------------|-------------------------------|
| GET  | store                  |                                             | ``[EntryStatus]``             |
| POST | store                  | ``{name, source, version?, description?, license?}`` | ``Entry`` (201)      |
| GET  | store/entry?ref=REF    |                                             | ``EntryStatus``               |
| GET  | store/mount?ref=REF    |                                             | ``{ref, path}``               |
| POST | store/pull             | ``{ref, allow?, ignore?, connections?}``    | ``PullProgress`` (202)        |
| GET  | store/pulls            |                                             | ``[PullProgress]``            |

``store/mount`` of an entry whose files changed since it was published (size, mtime or ctime
against its manifest) is a 409 naming them, with the verify/pull hint; listings and entries then
say ``state: corrupt`` and ``problem`` (and ``note`` when the manifest allows a size-only check).
``allow``/``ignore`` are lists of glob patterns choosing files of a Hugging Face repo and
``connections`` a whole number from 1 to 64, as for ``starverse store pull``; they are checked
before the pull starts (a 400 with a hint), and so is the owner: only an entry's owner (or an
admin) fills it, another user's pull of it is a 403. Listings and entries carry ``owner``
(``{uid, name}``). A pull runs in a server thread and persists its
progress on the store, so ``store/pulls`` shows it, and also pulls started by notebooks, the
CLI or other nodes.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from tornado import web

from jupyter_starverse.catalog import PullProgress, check_pull_options, parse_ref
from jupyter_starverse.client import Starverse
from jupyter_starverse.errors import BadInputError

from ._base import FieldsAnswer, StarverseHandler, body_text

__all__ = ["MountInfo", "routes"]


@dataclass(frozen=True)
class MountInfo(FieldsAnswer):
    """Where an entry is mounted (the same path in every pod)."""

    ref: str
    path: str


class _Pulls:
    """Background pulls started through the server (one thread per ref at a time)."""

    _lock = threading.Lock()

    _Key = tuple[str, tuple[str, ...], tuple[str, ...]]
    _threads: dict[_Key, threading.Thread] = {}

    @classmethod
    def start(
        cls,
        client: Starverse,
        ref: str,
        *,
        connections: int | None = None,
        allow: tuple[str, ...] = (),
        ignore: tuple[str, ...] = (),
    ) -> PullProgress:
        key = (ref, allow, ignore)  # new patterns on a cached repo add files: a pull of their own
        with cls._lock:
            running = cls._threads.get(key)
            if running is None or not running.is_alive():

                def work() -> None:
                    try:
                        client.catalog.pull(ref, connections=connections, allow=allow or None, ignore=ignore or None)
                    except Exception:  # noqa: S110 - the failure is persisted as the pull's progress
                        pass

                thread = threading.Thread(target=work, name=f"starverse-pull-{ref}", daemon=True)
                cls._threads[key] = thread
                thread.start()
        return PullProgress(ref, "waiting", 0, None, 0, None, 0.0, None, False, time.time())


class StoreHandler(StarverseHandler):
    @web.authenticated
    async def get(self) -> None:
        self.finish_json(await self.run(self.client.catalog.ls))

    @web.authenticated
    async def post(self) -> None:
        body = self.json_body()
        entry = await self.run(
            self.client.catalog.add_dataset,
            body_text(body, "name", required=True),
            body_text(body, "source", required=True),
            version=body_text(body, "version"),
            description=body_text(body, "description"),
            license=body_text(body, "license"),
        )
        self.finish_json(entry, status=201)


class EntryHandler(StarverseHandler):
    @web.authenticated
    async def get(self) -> None:
        self.finish_json(await self.run(self.client.catalog.status, self._ref()))

    def _ref(self) -> str:
        ref = self.query("ref")
        if not ref:
            raise BadInputError(
                "query argument 'ref' is required", field="ref", hint="e.g. ?ref=mnist or ?ref=hf:org/repo"
            )
        return ref


class MountHandler(EntryHandler):
    @web.authenticated
    async def get(self) -> None:
        ref = self._ref()
        path = await self.run(self.client.catalog.mount, ref)
        self.finish_json(MountInfo(ref, str(path)))


class PullHandler(StarverseHandler):
    @web.authenticated
    async def post(self) -> None:
        body = self.json_body()
        ref = body_text(body, "ref", required=True)
        assert ref is not None
        parsed = parse_ref(ref)  # bad refs and options are a 400 now, not a failed thread later
        n, allow, ignore = check_pull_options(
            parsed, connections=body.get("connections"), allow=body.get("allow"), ignore=body.get("ignore")
        )
        if parsed.kind == "dataset":
            await self.run(self.client.catalog.status, ref)  # unknown datasets are a 404
        await self.run(self.client.catalog.check_pull, ref)  # another user's entry is a 403, not a silent thread
        self.finish_json(_Pulls.start(self.client, ref, connections=n, allow=allow, ignore=ignore), status=202)


class PullsHandler(StarverseHandler):
    @web.authenticated
    async def get(self) -> None:
        self.finish_json(await self.run(self.client.catalog.pulls))


routes: list[tuple[str, type[StarverseHandler]]] = [
    (r"store", StoreHandler),
    (r"store/entry", EntryHandler),
    (r"store/mount", MountHandler),
    (r"store/pull", PullHandler),
    (r"store/pulls", PullsHandler),
]
