"""Chat sessions: a model in a worker process of its own, answers streamed piece by piece.

The worker (:mod:`._worker`) is a separate process, not a thread of the kernel or the server:
a long generation never blocks a cell, a widget or the event loop, and the kernel can be
interrupted or restarted without losing the worker's state or vice versa. It stops on its own
when its parent goes away (stdin closes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from jupyter_starverse._inputs import check_path
from jupyter_starverse._settings import Settings
from jupyter_starverse.catalog import Catalog
from jupyter_starverse.errors import BackendUnavailableError, BadInputError, NotFoundError
from jupyter_starverse.experiments import ExperimentPaths, list_runs

__all__ = ["ChatSession", "ChatSessions", "ChatTurn", "resolve_model"]

_OUTPUT_DIRS = ("output", "model", "final")
_MAX_MESSAGES = 200


def _is_model_dir(path: Path) -> bool:
    return (path / "config.json").is_file()


def resolve_model(settings: Settings, catalog: Catalog, model: str) -> Path:
    """The folder of ``model``: a store model (``hf:ORG/REPO[@REV]``, pulled if needed), an
    experiment's output (``exp:NAME`` = its newest run, ``exp:NAME/JOB``) or a model folder."""
    if not isinstance(model, str) or not model.strip():
        raise BadInputError("model is required", field="model", hint="hf:ORG/REPO@REV, exp:EXPERIMENT or a folder")
    check_path(model, "model", hint="hf:ORG/REPO@REV, exp:EXPERIMENT or a folder (names up to 255 bytes)")
    model = model.strip()
    if model.startswith("hf:"):
        if catalog.status(model).state != "cached":
            catalog.pull(model)
        return catalog.mount(model)
    if model.startswith("exp:"):
        name, _, job = model[4:].partition("/")
        exp = ExperimentPaths.of(settings.experiments, name)
        runs = (
            [exp.run(job)] if job else [r for r in list_runs(settings.experiments) if r.root.parent.parent == exp.root]
        )
        for run in runs:
            for sub in _OUTPUT_DIRS:
                if _is_model_dir(run.root / sub):
                    return run.root / sub
        raise NotFoundError(
            f"experiment {model[4:]!r} has no model output (a folder with config.json under {', '.join(_OUTPUT_DIRS)})",
            hint="wait for the run to finish, or give a store model hf:ORG/REPO@REV",
        )
    path = Path(model).expanduser()
    if _is_model_dir(path):
        return path.absolute()
    raise BadInputError(
        f"{model!r} is not a model", field="model", hint="hf:ORG/REPO@REV (store), exp:EXPERIMENT, or a model folder"
    )


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

    @property
    def prompt(self) -> str:
        return self.messages[-1]["content"]

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def wait(self, timeout: float | None = None) -> ChatTurn:
        if not self.done.wait(timeout):
            raise BackendUnavailableError("the chat worker did not answer in time", hint="try a shorter answer")
        if self.error:
            raise BackendUnavailableError(f"the chat worker failed: {self.error}", hint="see the worker log")
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
                    raise BackendUnavailableError(f"the chat worker failed: {self.error}", hint="see the worker log")
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


def _check_messages(messages: object) -> tuple[dict[str, str], ...]:
    hint = 'give [{"role": "user", "content": "..."}, ...] ending with a user message'
    if not isinstance(messages, list | tuple) or not messages or len(messages) > _MAX_MESSAGES:
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


class ChatSession:
    """A model loaded in a worker process; :meth:`ask` streams its answer.

    Parameters
    ----------
    model
        What the user picked (``hf:ORG/REPO@REV``, ``exp:NAME``, a folder): recorded with feedback.
    folder
        The model folder the worker loads.
    """

    def __init__(self, model: str, folder: Path, *, log_dir: Path, start_timeout: float = 120.0) -> None:
        self.id = uuid.uuid4().hex[:12]
        self.model = model
        self.folder = folder
        self.started_at = time.time()
        self._turns: dict[str, ChatTurn] = {}
        self._lock = threading.Lock()
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"chat-{self.id}.log"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        with open(self.log_path, "ab") as err:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "jupyter_starverse.feedback._worker", str(folder)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env=env,
                text=True,
                encoding="utf-8",
                start_new_session=True,  # a kernel interrupt (SIGINT to its group) leaves it alone
            )
        assert self._proc.stdout is not None
        ready = self._first_line(self._proc.stdout, start_timeout)
        if not ready.get("ready"):
            self.close()
            raise BackendUnavailableError(
                f"the chat worker could not load {model}: {ready.get('error') or 'it exited'}",
                hint=f"see {self.log_path}",
            )
        self._reader = threading.Thread(target=self._read, name=f"chat-{self.id}", daemon=True)
        self._reader.start()

    def _first_line(self, out: IO[str], timeout: float) -> dict[str, Any]:
        box: list[str] = []
        t = threading.Thread(target=lambda: box.append(out.readline()), daemon=True)
        t.start()
        t.join(timeout)
        if not box or not box[0]:
            return {"ready": False, "error": "no answer from the worker" if not box else None}
        try:
            data = json.loads(box[0])
        except ValueError:
            return {"ready": False, "error": box[0][:200]}
        return data if isinstance(data, dict) else {"ready": False}

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            turn = self._turns.get(str(msg.get("id")))
            if turn is None:
                continue
            if "piece" in msg:
                turn.pieces.append(str(msg["piece"]))
                if turn.on_piece is not None:
                    try:
                        turn.on_piece(str(msg["piece"]))
                    except Exception as e:  # a UI callback failing must not stop the stream
                        turn.error = f"display failed: {e}"
            elif msg.get("done") or "error" in msg:
                turn.error = msg.get("error") or turn.error
                turn.tokens = int(msg.get("tokens") or 0)
                turn.seconds = float(msg.get("seconds") or 0.0)
                turn.done.set()
        for turn in self._turns.values():  # the worker is gone: nothing more will come
            if not turn.done.is_set():
                turn.error = turn.error or f"the chat worker exited (see {self.log_path})"
                turn.done.set()

    @property
    def alive(self) -> bool:
        return self._proc.poll() is None

    def ask(
        self,
        messages: object,
        *,
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        seed: int = 0,
        on_piece: Callable[[str], None] | None = None,
    ) -> ChatTurn:
        """Start an answer to ``messages`` (or one prompt string); returns at once with the turn."""
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        msgs = _check_messages(messages)
        if not 1 <= int(max_new_tokens) <= 4096:
            raise BadInputError("max_new_tokens must be 1..4096", field="max_new_tokens", hint="e.g. 64")
        if not self.alive:
            raise BackendUnavailableError("the chat worker has stopped", hint=f"start a new chat; see {self.log_path}")
        turn = ChatTurn(uuid.uuid4().hex[:12], msgs, on_piece=on_piece)
        request = {
            "id": turn.id,
            "messages": list(msgs),
            "max_new_tokens": int(max_new_tokens),
            "temperature": float(temperature),
            "seed": int(seed),
        }
        with self._lock:
            self._turns[turn.id] = turn
            assert self._proc.stdin is not None
            try:
                self._proc.stdin.write(json.dumps(request, ensure_ascii=False) + "\n")
                self._proc.stdin.flush()
            except OSError as e:
                raise BackendUnavailableError(f"the chat worker has stopped: {e}", hint="start a new chat") from e
        return turn

    def turn(self, turn_id: str) -> ChatTurn:
        try:
            return self._turns[turn_id]
        except KeyError:
            raise NotFoundError(f"no answer {turn_id!r} in chat {self.id}", hint="ask again") from None

    def close(self) -> None:
        """Stop the worker (closing stdin ends it; SIGTERM if it lingers)."""
        if self._proc.stdin is not None:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
        try:
            self._proc.wait(5)
        except subprocess.TimeoutExpired:
            self._proc.terminate()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "model": self.model, "alive": self.alive, "started_at": self.started_at}

    def __enter__(self) -> ChatSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ChatSessions:
    """The sessions one process (a server, a kernel) keeps, by id."""

    def __init__(self, settings: Settings, catalog: Catalog) -> None:
        self.settings = settings
        self.catalog = catalog
        self._sessions: dict[str, ChatSession] = {}
        self._lock = threading.Lock()

    def models(self) -> list[str]:
        """What a chat can pick: cached store models, then experiments with a saved model (``exp:NAME``)."""
        out = [s.entry.ref for s in self.catalog.ls() if s.entry.kind == "model" and s.state == "cached"]
        root = Path(self.settings.experiments)
        if root.is_dir():
            for exp in sorted(root.iterdir()):
                runs = list(exp.glob("runs/*"))
                if any(_is_model_dir(r / sub) for r in runs for sub in _OUTPUT_DIRS):
                    out.append(f"exp:{exp.name}")
        return out

    def start(self, model: str) -> ChatSession:
        folder = resolve_model(self.settings, self.catalog, model)
        session = ChatSession(model, folder, log_dir=self.settings.home / "chat")
        with self._lock:
            self._sessions[session.id] = session
        return session

    def get(self, session_id: str) -> ChatSession:
        try:
            return self._sessions[session_id]
        except KeyError:
            raise NotFoundError(f"no chat session {session_id!r}", hint="start one with the model you want") from None

    def list(self) -> list[ChatSession]:
        return list(self._sessions.values())

    def close(self, session_id: str | None = None) -> None:
        with self._lock:
            ids = [session_id] if session_id else list(self._sessions)
            found = [self._sessions.pop(i) for i in ids if i in self._sessions]
        if session_id and not found:
            raise NotFoundError(f"no chat session {session_id!r}", hint="it may have been closed already")
        for s in found:
            s.close()
