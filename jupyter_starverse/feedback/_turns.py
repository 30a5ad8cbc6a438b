"""One question and its answer as a chat session streams it (:class:`ChatTurn`), and the checks of
what a caller asks: a list of ``{role, content}`` messages or one prompt, within the limits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from jupyter_starverse.errors import BackendUnavailableError, BadInputError

__all__ = ["MAX_MESSAGES", "ChatTurn", "ask_input", "check_messages", "json_object"]

MAX_MESSAGES = 200


@dataclass
class ChatTurn:
    """One answer being generated: pieces arrive while ``done`` is unset."""

    id: str
    messages: tuple[dict[str, str], ...]
    pieces: list[str] = field(default_factory=list)
    error: str | None = None
    tokens: int = 0
    seconds: float = 0.0
    done: threading.Event = field(default_factory=threading.Event)
    on_piece: Callable[[str], None] | None = None
    #: Who generates the answer, and where to look when it fails (named in errors).
    source: str = "the chat worker"
    hint: str = "see the worker log"

    @property
    def prompt(self) -> str:
        return self.messages[-1]["content"]

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def wait(self, timeout: float | None = None) -> ChatTurn:
        if not self.done.wait(timeout):
            raise BackendUnavailableError(f"{self.source} did not answer in time", hint="try a shorter answer")
        if self.error:
            raise BackendUnavailableError(f"{self.source} failed: {self.error}", hint=self.hint)
        return self

    def stream(self, poll: float = 0.05) -> Iterator[str]:
        """Yield pieces as they arrive, until the answer is complete."""
        sent = 0
        while True:
            finished = self.done.wait(poll)
            while sent < len(self.pieces):
                sent += 1
                yield self.pieces[sent - 1]
            if finished:
                if self.error:
                    raise BackendUnavailableError(f"{self.source} failed: {self.error}", hint=self.hint)
                return

    def to_json(self, after: int = 0) -> dict[str, Any]:
        return {
            "id": self.id,
            "prompt": self.prompt,
            "pieces": self.pieces[after:],
            "next": len(self.pieces),
            "text": self.text,
            "done": self.done.is_set(),
            "error": self.error,
            "tokens": self.tokens,
            "seconds": self.seconds,
        }


def check_messages(messages: object) -> tuple[dict[str, str], ...]:
    hint = 'give [{"role": "user", "content": "..."}, ...] ending with a user message'
    if not isinstance(messages, list | tuple) or not messages or len(messages) > MAX_MESSAGES:
        raise BadInputError("messages must be a non-empty list", field="messages", hint=hint)
    out = []
    for m in messages:
        if (
            not isinstance(m, dict)
            or m.get("role") not in ("system", "user", "assistant")
            or not isinstance(m.get("content"), str)
        ):
            raise BadInputError("each message needs a role and text content", field="messages", hint=hint)
        out.append({"role": str(m["role"]), "content": str(m["content"])})
    if out[-1]["role"] != "user" or not out[-1]["content"].strip():
        raise BadInputError("the last message must be a non-empty user message", field="messages", hint=hint)
    return tuple(out)


def json_object(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one (what an endpoint answers is data)."""
    return value if isinstance(value, dict) else {}


def ask_input(messages: object, max_new_tokens: int) -> tuple[dict[str, str], ...]:
    """The checked messages of one question (a prompt string is one user message) and its length bound."""
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    msgs = check_messages(messages)
    if not 1 <= int(max_new_tokens) <= 4096:
        raise BadInputError("max_new_tokens must be 1..4096", field="max_new_tokens", hint="e.g. 64")
    return msgs
