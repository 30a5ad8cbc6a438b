"""Chat with a model and vote on its answers (plain ipywidgets, so it works in VS Code too).

``ChatWidget(client, feedback="chat")`` shows a model picker (store models and experiment
outputs, or any ``hf:ORG/REPO@REV`` / ``exp:NAME`` / folder typed in), a conversation whose
answers stream in token by token, and under each answer thumbs up/down, an optional better
answer and a comment, recorded in the feedback log on the store. ``endpoint=ID|URL`` (or
picking ``endpoint:ID``) chats with a served model instead; votes then name its store version.
Generation runs in a worker process of its own (:class:`jupyter_starverse.feedback.ChatSession`),
so neither the kernel nor the widget waits on it; no Jupyter server is needed. Errors are shown, never swallowed.
"""

from __future__ import annotations

import html
import threading
from typing import TYPE_CHECKING

import ipywidgets as W

from jupyter_starverse.errors import StarverseError

if TYPE_CHECKING:
    from jupyter_starverse.client import Starverse
    from jupyter_starverse.feedback import ChatSession, ChatTurn, EndpointChatSession, FeedbackRecord

__all__ = ["AnswerBox", "ChatWidget", "model_choices"]


_ENDPOINT = "endpoint:"


def model_choices(client: Starverse) -> list[str]:
    """Cached store models, experiments with a saved model (``exp:NAME``), then running endpoints (``endpoint:ID``)."""
    try:
        served = [f"{_ENDPOINT}{e.id}" for e in client.serve.ls() if e.state == "running"]
    except StarverseError:
        served = []
    return [*client.chats.models(), *served]


class AnswerBox(W.VBox):  # type: ignore[misc]
    """One answer: streamed text, thumbs up/down, a better answer and a comment."""

    def __init__(self, chat: ChatWidget, turn: ChatTurn) -> None:
        self.chat = chat
        self.turn = turn
        self.text = W.HTML(value="<i>…</i>")
        self.up = W.Button(description="👍", tooltip="thumbs up", layout=W.Layout(width="3em"), disabled=True)
        self.down = W.Button(description="👎", tooltip="thumbs down", layout=W.Layout(width="3em"), disabled=True)
        self.better = W.Textarea(placeholder="a better answer (optional)", layout=W.Layout(width="60%"))
        self.comment = W.Text(placeholder="comment (optional)", layout=W.Layout(width="60%"))
        self.save = W.Button(description="save feedback", disabled=True)
        self.status = W.HTML()
        self.vote: str | None = None
        self.up.on_click(lambda _: self.record("up"))
        self.down.on_click(lambda _: self.record("down"))
        self.save.on_click(lambda _: self.record(self.vote))
        votes = W.HBox([self.up, self.down, self.status])
        super().__init__([self.text, votes, self.better, self.comment, self.save])

    def show(self) -> None:
        """Redraw the text so far (called from the worker's reader thread as pieces arrive)."""
        body = html.escape(self.turn.text) or "<i>…</i>"
        self.text.value = f"<div style='white-space:pre-wrap'><b>{html.escape(self.chat.model)}:</b> {body}</div>"

    def finished(self) -> None:
        self.show()
        if self.turn.error:
            self.status.value = f"<span style='color:#b00'>{html.escape(self.turn.error)}</span>"
        for b in (self.up, self.down, self.save):
            b.disabled = False

    def record(self, vote: str | None) -> FeedbackRecord | None:
        """Append this answer's feedback to the log (a later click replaces the earlier one)."""
        session = self.chat.session
        try:
            rec = self.chat.client.feedback.record(
                self.chat.feedback,
                model=self.chat.model,
                prompt=self.turn.prompt,
                answer=self.turn.text or "(empty answer)",
                vote=vote,
                better=self.better.value or None,
                comment=self.comment.value or None,
                answer_id=self.turn.id,
                session=session.id if session else None,
            )
        except StarverseError as e:
            self.status.value = f"<span style='color:#b00'>{html.escape(str(e))}</span>"
            return None
        self.vote = vote
        self.up.button_style = "success" if vote == "up" else ""
        self.down.button_style = "danger" if vote == "down" else ""
        self.status.value = f"recorded in {html.escape(self.chat.feedback)}"
        return rec


class ChatWidget(W.VBox):  # type: ignore[misc]
    """Pick a model, chat, vote. ``feedback`` names the log the votes go to."""

    def __init__(
        self,
        client: Starverse | None = None,
        *,
        model: str | None = None,
        feedback: str = "chat",
        max_new_tokens: int = 64,
        endpoint: str | None = None,
        token: str | None = None,
    ) -> None:
        if client is None:
            from jupyter_starverse.client import Starverse

            client = Starverse()
        self.client = client
        self.feedback = feedback
        self.max_new_tokens = max_new_tokens
        self.token = token  # the reference (env:NAME, file:PATH) of an endpoint URL's token
        self.session: ChatSession | EndpointChatSession | None = None
        self.model = ""
        self.messages: list[dict[str, str]] = []
        self.answers: list[AnswerBox] = []
        self.picker = W.Combobox(
            options=model_choices(client), value=model or (endpoint and self._choice(endpoint)) or "",
            placeholder="hf:ORG/REPO@REV, exp:EXPERIMENT, a folder, endpoint:ID or http://HOST:PORT/v1",
            ensure_option=False, layout=W.Layout(width="60%"),
        )  # fmt: skip
        self.load_button = W.Button(description="load model")
        self.status = W.HTML()
        self.conversation = W.VBox()
        self.prompt = W.Textarea(placeholder="ask something", layout=W.Layout(width="70%"), disabled=True)
        self.send_button = W.Button(description="send", button_style="primary", disabled=True)
        self.load_button.on_click(lambda _: self.load(self.picker.value))
        self.send_button.on_click(lambda _: self.send(self.prompt.value))
        self._loading: threading.Thread | None = None
        self._finisher: threading.Thread | None = None
        super().__init__(
            [
                W.HBox([self.picker, self.load_button]),
                self.status,
                self.conversation,
                W.HBox([self.prompt, self.send_button]),
            ]
        )
        if model or endpoint:
            self.load(model or self._choice(endpoint or ""))
        elif any(not str(o).startswith(_ENDPOINT) for o in self.picker.options):
            client.chats.prewarm()  # while the user picks, a spare worker imports torch: the load waits less

    @staticmethod
    def _choice(endpoint: str) -> str:
        return endpoint if endpoint.startswith(("http://", "https://", _ENDPOINT)) else _ENDPOINT + endpoint

    def _error(self, e: Exception) -> None:
        self.status.value = f"<span style='color:#b00'>{html.escape(str(e))}</span>"

    def load(self, model: str, *, wait: bool = False) -> None:
        """Start a worker for ``model`` (in a thread: the kernel stays free while it loads)."""
        self.status.value = f"loading {html.escape(model)} …"
        self.send_button.disabled = self.prompt.disabled = True

        def work() -> None:
            try:
                if model.startswith(("http://", "https://")):
                    new = self.client.chats.start(endpoint=model, token=self.token)
                elif model.startswith(_ENDPOINT):
                    new = self.client.chats.start(endpoint=model[len(_ENDPOINT) :])
                else:
                    new = self.client.chats.start(model)
                old, self.session = self.session, new
                if old is not None:
                    self.client.chats.close(old.id)
            except StarverseError as e:
                self._error(e)
                return
            self.model, self.messages = new.model, []  # an endpoint names the store version it serves
            via = f" at {html.escape(model)}" if new.model != model else ""
            self.status.value = (
                f"chatting with <b>{html.escape(new.model)}</b>{via}; votes go to <b>{html.escape(self.feedback)}</b>"
            )
            self.send_button.disabled = self.prompt.disabled = False

        self._loading = threading.Thread(target=work, name="starverse-chat-load", daemon=True)
        self._loading.start()
        if wait:
            self._loading.join()

    def send(self, text: str) -> AnswerBox | None:
        """Ask ``text``; the answer streams into a new :class:`AnswerBox` (returned at once)."""
        if self.session is None or not text.strip():
            return None
        if self._finisher is not None and self._finisher.is_alive():
            self.status.value = "still answering the last question; ask again when it is done"
            return None
        self.messages.append({"role": "user", "content": text})
        question = W.HTML(value=f"<div style='white-space:pre-wrap'><b>you:</b> {html.escape(text)}</div>")
        box: dict[str, AnswerBox] = {}

        def piece(_: str) -> None:
            if "a" in box:
                box["a"].show()

        try:
            turn = self.session.ask(self.messages, max_new_tokens=self.max_new_tokens, on_piece=piece)
        except StarverseError as e:
            self.messages.pop()
            self._error(e)
            return None
        answer = box["a"] = AnswerBox(self, turn)
        self.answers.append(answer)
        self.conversation.children = (*self.conversation.children, question, answer)
        self.prompt.value = ""

        def finish() -> None:
            turn.done.wait()
            answer.finished()
            self.messages.append({"role": "assistant", "content": turn.text})

        self._finisher = threading.Thread(target=finish, name="starverse-chat-answer", daemon=True)
        self._finisher.start()
        return answer

    def wait(self, timeout: float = 120.0) -> None:
        """Block until the model is loaded and the last answer is complete (for scripts and tests)."""
        for t in (self._loading, self._finisher):
            if t is not None:
                t.join(timeout)

    def close(self) -> None:
        """Stop the worker, then the widget."""
        if self.session is not None:
            self.client.chats.close(self.session.id)
            self.session = None
        super().close()

    def __repr__(self) -> str:
        return f"ChatWidget(model={self.model!r}, feedback={self.feedback!r}, answers={len(self.answers)})"
