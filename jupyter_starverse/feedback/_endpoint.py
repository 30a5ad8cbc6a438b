"""A chat with a served model over its OpenAI-compatible API (``starverse serve``, vLLM, any
``/v1/chat/completions`` endpoint): the target and its token by reference (:class:`EndpointTarget`),
and a session that streams each answer from the endpoint in a thread (:class:`EndpointChatSession`),
with the same turns as a local chat worker's.
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_starverse.errors import BackendUnavailableError, BadInputError, NotFoundError, PermissionDeniedError

from ._turns import ChatTurn, ask_input, json_object

__all__ = ["EndpointChatSession", "EndpointTarget", "down_hint", "token_ref"]


def down_hint(label: str) -> str:
    return (f"start it with `starverse serve MODEL` and pick a running one from `starverse serve ls`"
            f" (or check the URL {label})") if label.startswith(("http://", "https://")) else (
            "start it again with `starverse serve MODEL`; `starverse serve ls` lists the running ones")  # fmt: skip


@dataclass(frozen=True)
class EndpointTarget:
    """Where a served model answers: an OpenAI-compatible base URL (``.../v1``) and its bearer token."""

    url: str
    token: str | None = None
    label: str = ""  # what the user named: a local endpoint id or the URL

    @classmethod
    def of_url(cls, url: object, token: object = None) -> EndpointTarget:
        """A remote endpoint: ``http(s)://HOST[:PORT][/v1]`` and a token *reference* (``env:NAME``, ``file:PATH``)."""
        hint = (
            "give http://HOST:PORT/v1 (an OpenAI-compatible endpoint) or a local endpoint id from `starverse serve ls`"
        )
        if not isinstance(url, str) or not url.startswith(("http://", "https://")) or len(url) > 2000:
            raise BadInputError(f"{url!r} is not an endpoint URL", field="endpoint", hint=hint)
        parts = urllib.parse.urlsplit(url)
        if not parts.hostname or parts.query or parts.fragment or not url.isprintable():
            raise BadInputError(f"{url!r} is not an endpoint URL", field="endpoint", hint=hint)
        base = url.rstrip("/")
        for tail in ("/chat/completions", "/completions", "/models"):
            base = base.removesuffix(tail)
        base = base if base.endswith("/v1") else base + "/v1"
        return cls(base, token_ref(token), url)


def token_ref(ref: object) -> str | None:
    """The token a reference names: ``env:NAME`` (a variable) or ``file:PATH`` (a file); never the secret itself."""
    if ref is None or ref == "":
        return None
    hint = "give env:VARIABLE or file:PATH (the token itself never goes on a command line or in a request)"
    if not isinstance(ref, str) or len(ref) > 4096:
        raise BadInputError("the token is a reference", field="token", hint=hint)
    kind, _, name = ref.partition(":")
    if kind == "env" and name:
        value = os.environ.get(name, "").strip()
        if not value:
            raise BadInputError(f"the variable {name} is not set", field="token", hint=f"export {name}=TOKEN first")
        return value
    if kind == "file" and name:
        try:
            return Path(name).expanduser().read_text(encoding="utf-8").strip() or None
        except OSError as e:
            raise BadInputError(f"cannot read the token file {name}: {e.strerror or e}", field="token",
                                hint="give a readable file holding the token") from None  # fmt: skip
    raise BadInputError("the token is a reference, not the token", field="token", hint=hint)


class EndpointChatSession:
    """A chat with a served model (``/v1/chat/completions``, streamed): nothing is loaded here.

    ``model`` is what feedback records name: the store version the endpoint's ``/v1/models`` card
    gives in its lineage (``starverse.lineage.model``), else the served name.
    """

    def __init__(self, target: EndpointTarget, *, timeout: float = 30.0) -> None:
        self.id = uuid.uuid4().hex[:12]
        self.target = target
        self.label = target.label or target.url
        self.started_at = time.time()
        self.log_path = None
        self._turns: dict[str, ChatTurn] = {}
        self._closed = False
        card = self._models(timeout)
        self.served_name = str(card.get("id") or "")
        info = json_object(card.get("starverse"))
        lineage = json_object(info.get("lineage"))
        self.lineage: dict[str, Any] = lineage
        self.model = str(lineage.get("model") or info.get("model") or self.served_name or target.url)

    def _request(self, path: str, body: dict[str, Any] | None, timeout: float) -> Any:
        headers = {"Accept": "application/json"}
        if self.target.token:
            headers["Authorization"] = f"Bearer {self.target.token}"
        data = None
        if body is not None:
            headers["Content-Type"] = "application/json"
            data = json.dumps(body, ensure_ascii=False).encode()
        req = urllib.request.Request(self.target.url + path, data=data, headers=headers)  # noqa: S310 - http(s) only
        try:
            return urllib.request.urlopen(req, timeout=timeout)  # noqa: S310 - http(s) checked in of_url
        except urllib.error.HTTPError as e:
            try:
                said = json.loads(e.read()).get("error", {}).get("message")
            except (ValueError, AttributeError, OSError):
                said = None
            if e.code in (401, 403):
                raise PermissionDeniedError(
                    f"the endpoint {self.label} refused the token: {said or e.reason}",
                    hint="give its token: a local endpoint's is read for you; for a URL pass --token env:NAME",
                ) from None
            raise BadInputError(f"the endpoint {self.label} answered {e.code}: {said or e.reason}", field="messages",
                                hint="see the endpoint's log") from None  # fmt: skip
        except (OSError, ValueError) as e:
            reason = getattr(e, "reason", e)
            raise BackendUnavailableError(f"the endpoint {self.label} does not answer: {reason}",
                                          hint=down_hint(self.label)) from None  # fmt: skip

    def _models(self, timeout: float) -> dict[str, Any]:
        with self._request("/models", None, timeout) as r:
            try:
                data = json.loads(r.read())
            except ValueError:
                data = None
        cards = data.get("data") if isinstance(data, dict) else None
        if not isinstance(cards, list) or not cards or not isinstance(cards[0], dict):
            raise BackendUnavailableError(f"{self.target.url}/models lists no model",
                                          hint="is it an OpenAI-compatible endpoint (`starverse serve`)?")  # fmt: skip
        return cards[0]

    @property
    def alive(self) -> bool:
        return not self._closed

    def ask(
        self,
        messages: object,
        *,
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        seed: int = 0,
        on_piece: Callable[[str], None] | None = None,
    ) -> ChatTurn:
        """Start an answer (streamed from the endpoint in a thread); returns at once with the turn."""
        msgs = ask_input(messages, max_new_tokens)
        if self._closed:
            raise BackendUnavailableError("this chat is closed", hint="start a new chat")
        turn = ChatTurn(uuid.uuid4().hex[:12], msgs, on_piece=on_piece, source=f"the endpoint {self.label}",
                        hint=down_hint(self.label))  # fmt: skip
        self._turns[turn.id] = turn
        body = {"messages": list(msgs), "max_tokens": int(max_new_tokens), "temperature": float(temperature),
                "seed": int(seed), "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
        if self.served_name:
            body["model"] = self.served_name
        threading.Thread(target=self._stream, args=(turn, body), name=f"chat-{self.id}", daemon=True).start()
        return turn

    def _stream(self, turn: ChatTurn, body: dict[str, Any]) -> None:
        started = time.monotonic()
        try:
            with self._request("/chat/completions", body, 600) as r:
                for raw in r:
                    line = raw.decode("utf-8", errors="replace").strip()
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    chunk = json.loads(data)
                    usage = chunk.get("usage")
                    if isinstance(usage, dict):
                        turn.tokens = int(usage.get("completion_tokens") or 0)
                    for choice in chunk.get("choices") or []:
                        piece = (choice.get("delta") or {}).get("content")
                        if isinstance(piece, str) and piece:
                            turn.pieces.append(piece)
                            if turn.on_piece is not None:
                                try:
                                    turn.on_piece(piece)
                                except Exception as e:  # a UI callback failing must not stop the stream
                                    turn.error = f"display failed: {e}"
        except Exception as e:  # the endpoint went away, or sent what is not SSE
            turn.error = str(e) if isinstance(e, BackendUnavailableError | BadInputError | PermissionDeniedError) \
                else f"the stream broke: {type(e).__name__}: {e}"  # fmt: skip
        turn.seconds = time.monotonic() - started
        turn.done.set()

    def turn(self, turn_id: str) -> ChatTurn:
        try:
            return self._turns[turn_id]
        except KeyError:
            raise NotFoundError(f"no answer {turn_id!r} in chat {self.id}", hint="ask again") from None

    def close(self) -> None:
        """Nothing to stop: the endpoint serves others too (``starverse serve stop ID`` stops it)."""
        self._closed = True

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "model": self.model, "alive": self.alive, "started_at": self.started_at,
                "endpoint": self.target.url, "served_name": self.served_name}  # fmt: skip

    def __enter__(self) -> EndpointChatSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
