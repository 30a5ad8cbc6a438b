"""``/jupyter-starverse/feedback`` and ``/jupyter-starverse/chat``: the chat panel over REST.

::

    GET    feedback                             -> [{name, records, versions}]
    GET    feedback/table?ref=LOG[@N]           -> FeedbackTable
    POST   feedback/records   {log, model, prompt, answer, vote?, better?, comment?,
                               answer_id?, session?}          -> FeedbackRecord (201)
    POST   feedback/snapshot  {log}                            -> FeedbackSnapshot (201)
    GET    chat/models                          -> [str] (and a spare chat worker warms up)
    GET    chat/sessions                        -> [ChatSession]
    POST   chat/sessions      {model} | {endpoint: ID|URL, token?: env:NAME|file:PATH} -> ChatSession (201)
    DELETE chat/sessions/ID                     -> 204
    POST   chat/sessions/ID/turns  {messages, max_new_tokens?}  -> ChatTurn (202)
    GET    chat/sessions/ID/turns/TURN?after=N  -> ChatTurn: the pieces after N

An answer streams by polling its turn: each GET returns the pieces that arrived after ``after``
and ``next`` to ask from next time, until ``done``. Generation runs in a worker process the
server started, never on the event loop. Votes are recorded as the server's user.
"""

from __future__ import annotations

from typing import Any

from tornado import web

from jupyter_starverse.errors import BadInputError

from ._base import StarverseHandler, parse_int

__all__ = ["routes"]

_SID = r"(?P<session_id>[A-Za-z0-9]{1,64})"
_TID = r"(?P<turn_id>[A-Za-z0-9]{1,64})"


def _text(body: dict[str, Any], key: str, *, required: bool = False) -> str | None:
    value = body.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise BadInputError(f"{key!r} must be a string", field=key, hint=f"send {key} as text")
    return value


class LogsHandler(StarverseHandler):
    @web.authenticated
    async def get(self) -> None:
        self.finish_json(await self.run(self.client.feedback.ls))


class TableHandler(StarverseHandler):
    @web.authenticated
    async def get(self) -> None:
        ref = self.query("ref")
        if not ref:
            raise BadInputError("query argument 'ref' is required", field="ref", hint="e.g. ?ref=chat or ?ref=chat@2")
        self.finish_json(await self.run(self.client.feedback.table, ref))


class RecordsHandler(StarverseHandler):
    @web.authenticated
    async def post(self) -> None:
        body = self.json_body()
        rec = await self.run(
            self.client.feedback.record,
            _text(body, "log", required=True),
            model=_text(body, "model", required=True),
            prompt=_text(body, "prompt", required=True),
            answer=_text(body, "answer", required=True),
            vote=_text(body, "vote"),
            better=_text(body, "better"),
            comment=_text(body, "comment"),
            answer_id=_text(body, "answer_id"),
            session=_text(body, "session"),
        )
        self.finish_json(rec, status=201)


class SnapshotHandler(StarverseHandler):
    @web.authenticated
    async def post(self) -> None:
        log = _text(self.json_body(), "log", required=True)
        self.finish_json(await self.run(self.client.feedback.snapshot, log), status=201)


class ModelsHandler(StarverseHandler):
    @web.authenticated
    async def get(self) -> None:
        models = await self.run(self.client.chats.models)
        if models:  # the chat section lists what to pick: a spare worker imports torch meanwhile
            await self.run(self.client.chats.prewarm)
        self.finish_json(models)


class SessionsHandler(StarverseHandler):
    @web.authenticated
    async def get(self) -> None:
        self.finish_json(self.client.chats.list())

    @web.authenticated
    async def post(self) -> None:
        body = self.json_body()
        endpoint, token = _text(body, "endpoint"), _text(body, "token")
        if endpoint is not None:
            if body.get("model") is not None:
                raise BadInputError("give a model or an endpoint, not both", field="endpoint",
                                    hint="the endpoint already names the model it serves")  # fmt: skip
            session = await self.run(lambda: self.client.chats.start(endpoint=endpoint, token=token))
        else:
            model = _text(body, "model", required=True)
            session = await self.run(lambda: self.client.chats.start(model, token=token))
        self.finish_json(session, status=201)


class SessionHandler(StarverseHandler):
    @web.authenticated
    async def delete(self, session_id: str) -> None:
        await self.run(self.client.chats.close, session_id)
        self.set_status(204)
        self.finish()


class TurnsHandler(StarverseHandler):
    @web.authenticated
    async def post(self, session_id: str) -> None:
        body = self.json_body()
        session = self.client.chats.get(session_id)
        tokens = body.get("max_new_tokens", 64)
        if not isinstance(tokens, int) or isinstance(tokens, bool):
            raise BadInputError("max_new_tokens must be a whole number", field="max_new_tokens", hint="e.g. 64")
        turn = await self.run(session.ask, body.get("messages"), max_new_tokens=tokens)
        self.finish_json(turn.to_json(), status=202)


class TurnHandler(StarverseHandler):
    @web.authenticated
    async def get(self, session_id: str, turn_id: str) -> None:
        turn = self.client.chats.get(session_id).turn(turn_id)
        after = parse_int(self.query("after"), "after", default=0, low=0, high=1_000_000)
        self.finish_json(turn.to_json(after or 0))


routes: list[tuple[str, type[StarverseHandler]]] = [
    (r"feedback", LogsHandler),
    (r"feedback/table", TableHandler),
    (r"feedback/records", RecordsHandler),
    (r"feedback/snapshot", SnapshotHandler),
    (r"chat/models", ModelsHandler),
    (r"chat/sessions", SessionsHandler),
    (rf"chat/sessions/{_SID}", SessionHandler),
    (rf"chat/sessions/{_SID}/turns", TurnsHandler),
    (rf"chat/sessions/{_SID}/turns/{_TID}", TurnHandler),
]
