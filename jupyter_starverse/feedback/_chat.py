"""Chat sessions: a model in a worker process of its own, answers streamed piece by piece.

The worker (:mod:`._worker`) is a separate process, not a thread of the kernel or the server:
a long generation never blocks a cell, a widget or the event loop, and the kernel can be
interrupted or restarted without losing the worker's state or vice versa. It stops on its own
when its parent goes away (stdin closes).

Most of a worker's cold start is importing torch and transformers, not the model's load.
:meth:`ChatSessions.prewarm` starts a *spare* worker that has imported them and waits for a
model (the panel asks for one when its chat section lists the models): the chat that starts next
takes it and waits only for the model's load. A spare nobody takes exits after the chat idle time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from jupyter_starverse._children import Child, Children
from jupyter_starverse._inputs import check_path
from jupyter_starverse._settings import Settings
from jupyter_starverse.catalog import Catalog
from jupyter_starverse.errors import BackendUnavailableError, BadInputError, NotFoundError
from jupyter_starverse.experiments import ExperimentPaths, list_runs

from ._endpoint import EndpointChatSession, EndpointTarget
from ._turns import ChatTurn, ask_input

__all__ = ["ChatSession", "ChatSessions", "SpareWorker", "resolve_model"]

_OUTPUT_DIRS = ("output", "model", "final")


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


#: The chat workers of this process (a kernel, a server), by session (``chat-ID``) or spare
#: (``spare-ID``): stopped when it exits.
WORKERS = Children("chat worker")


def _start_worker(key: str, folder: str, idle_seconds: float, log_path: Path) -> Child:
    """A worker process loading ``folder`` (``-``: a spare that waits for ``{"load": FOLDER}``), in
    a session of its own (a kernel interrupt, SIGINT to its group, leaves it alone). Stopping it
    closes its stdin, which ends it; SIGTERM after 5 s, then SIGKILL, if it lingers."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    argv = [sys.executable, "-m", "jupyter_starverse.feedback._worker", folder, f"{idle_seconds:g}"]
    with open(log_path, "ab") as err:
        return WORKERS.start(key, argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                             text=True, ends_on_eof=True, grace=5.0)  # fmt: skip


@dataclass
class SpareWorker:
    """A worker that imported torch and transformers and waits for the model a chat names."""

    child: Child
    log_path: Path
    started_at: float = field(default_factory=time.monotonic)

    @property
    def proc(self) -> subprocess.Popen[str]:
        return self.child.proc

    @property
    def alive(self) -> bool:
        return self.child.alive

    def close(self) -> None:
        """End it now: it holds no model and no answer (SIGTERM: it may still be importing)."""
        self.child.stop(now=True)


class ChatSession:
    """A model loaded in a worker process; :meth:`ask` streams its answer.

    Parameters
    ----------
    model
        What the user picked (``hf:ORG/REPO@REV``, ``exp:NAME``, a folder): recorded with feedback.
    folder
        The model folder the worker loads.
    spare
        A spare worker to load it in (:meth:`ChatSessions.prewarm`): the start then waits only for
        the model's load, not for the imports. A spare that is gone is replaced by a new worker.
    """

    def __init__(
        self,
        model: str,
        folder: Path,
        *,
        log_dir: Path,
        start_timeout: float = 120.0,
        idle_seconds: float = 0.0,
        spare: SpareWorker | None = None,
    ) -> None:
        self.id = uuid.uuid4().hex[:12]
        self.model = model
        self.folder = folder
        self.started_at = time.time()
        self.idle_seconds = idle_seconds
        self.restarts = 0  # how often a question woke the worker after it exited idle
        self._asleep = False  # the worker exited idle: the next question starts another
        self._start_timeout = start_timeout
        self._turns: dict[str, ChatTurn] = {}
        self._lock = threading.Lock()
        #: What the last start cost, in seconds: the worker's ``imports`` (0 when a spare had them
        #: done), ``tokenizer`` and ``model`` loads, and ``ready``: the whole wait here.
        self.load_seconds: dict[str, float] = {}
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = spare.log_path if spare is not None else log_dir / f"chat-{self.id}.log"
        self._spawn(spare)

    def _spawn(self, spare: SpareWorker | None = None) -> None:
        """Start the worker with the model (or hand the model to ``spare``) and wait for its ``ready`` line."""
        began = time.monotonic()
        ready: dict[str, Any] = {}
        if spare is not None and spare.alive:
            self._child = spare.child
            assert self._proc.stdin is not None and self._proc.stdout is not None
            try:
                self._proc.stdin.write(json.dumps({"load": str(self.folder)}, ensure_ascii=False) + "\n")
                self._proc.stdin.flush()
                ready = self._first_line(self._proc.stdout, self._start_timeout)
            except (OSError, ValueError):
                ready = {}
            if not ready.get("ready") and not ready.get("error"):  # it exited (idle) as it was taken
                self._child.stop()
                spare = None
        if spare is None or not ready:
            self._child = _start_worker(f"chat-{self.id}", str(self.folder), self.idle_seconds, self.log_path)
            assert self._proc.stdout is not None
            ready = self._first_line(self._proc.stdout, self._start_timeout)
            spare = None
        if not ready.get("ready"):
            self.close()
            raise BackendUnavailableError(
                f"the chat worker could not load {self.model or self.folder}: {ready.get('error') or 'it exited'}",
                hint=f"see {self.log_path}",
            )
        raw = ready.get("seconds")
        got = {k: float(v) for k, v in raw.items() if isinstance(v, int | float)} if isinstance(raw, dict) else {}
        if spare is not None:
            got["imports"] = 0.0  # the spare had them done before this chat asked
        self.load_seconds = {**got, "ready": round(time.monotonic() - began, 3)}
        self._asleep = False
        self._reader = threading.Thread(target=self._read, args=(self._proc,), name=f"chat-{self.id}", daemon=True)
        self._reader.start()

    def _first_line(self, out: IO[str], timeout: float) -> dict[str, Any]:
        """The worker's ``ready`` line (a spare's ``warm`` line before it is skipped)."""
        box: list[str] = []

        def read() -> None:
            while True:
                line = out.readline()
                if not line or '"warm"' not in line:
                    box.append(line)
                    return

        t = threading.Thread(target=read, daemon=True)
        t.start()
        t.join(timeout)
        if not box or not box[0]:
            return {"ready": False, "error": "no answer from the worker" if not box else None}
        try:
            data = json.loads(box[0])
        except ValueError:
            return {"ready": False, "error": box[0][:200]}
        return data if isinstance(data, dict) else {"ready": False}

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if msg.get("idle"):  # it offers to go: let it, unless a question was sent meanwhile
                with self._lock:
                    if not any(not t.done.is_set() for t in self._turns.values()):
                        self._asleep = True
                        self._close_stdin(proc)
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
        if proc is not self._proc:  # a worker that went idle, already replaced: the turns are the new one's
            return
        for turn in self._turns.values():  # the worker is gone: nothing more will come
            if not turn.done.is_set():
                turn.error = turn.error or f"the chat worker exited (see {self.log_path})"
                turn.done.set()

    @property
    def _proc(self) -> subprocess.Popen[str]:
        """The worker process now (another one after the worker exited idle and was woken)."""
        return self._child.proc

    @property
    def alive(self) -> bool:
        """Whether the session answers: its worker runs, or exited idle and starts at the next question."""
        return self._proc.poll() is None or self._asleep

    @property
    def asleep(self) -> bool:
        """The worker exited after ``idle_seconds`` without a question; the model is not in memory."""
        return self._asleep and self._proc.poll() is not None

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
        msgs = ask_input(messages, max_new_tokens)
        turn = ChatTurn(uuid.uuid4().hex[:12], msgs, on_piece=on_piece)
        request = {
            "id": turn.id,
            "messages": list(msgs),
            "max_new_tokens": int(max_new_tokens),
            "temperature": float(temperature),
            "seed": int(seed),
        }
        # one lock from the wake-up to the write: the reader lets an idle worker go only when no
        # question is pending, so a question never lands in a worker on its way out
        with self._lock:
            if self._asleep:
                self._child.stop(grace=30)  # it said idle and its stdin is closed: it is on its way out
                self._spawn()  # loads the model again: the first answer after a pause waits for it
                self.restarts += 1
            if self._proc.poll() is not None:
                raise BackendUnavailableError(
                    "the chat worker has stopped", hint=f"start a new chat; see {self.log_path}"
                )
            self._turns[turn.id] = turn
            assert self._proc.stdin is not None
            try:
                self._proc.stdin.write(json.dumps(request, ensure_ascii=False) + "\n")
                self._proc.stdin.flush()
            except (OSError, ValueError) as e:  # ValueError: its stdin was closed
                raise BackendUnavailableError(f"the chat worker has stopped: {e}", hint="start a new chat") from e
        return turn

    def turn(self, turn_id: str) -> ChatTurn:
        try:
            return self._turns[turn_id]
        except KeyError:
            raise NotFoundError(f"no answer {turn_id!r} in chat {self.id}", hint="ask again") from None

    @staticmethod
    def _close_stdin(proc: subprocess.Popen[str]) -> None:
        if proc.stdin is not None:
            try:
                proc.stdin.close()
            except OSError:
                pass

    def close(self) -> None:
        """Stop the worker (closing stdin ends it; SIGTERM if it lingers)."""
        self._asleep = False
        self._child.stop()

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "model": self.model,
            "alive": self.alive,
            "asleep": self.asleep,
            "started_at": self.started_at,
            "load_seconds": dict(self.load_seconds),
        }

    def __enter__(self) -> ChatSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ChatSessions:
    """The sessions one process (a server, a kernel) keeps, by id."""

    def __init__(
        self, settings: Settings, catalog: Catalog, *, endpoints: Callable[[str], EndpointTarget] | None = None
    ) -> None:
        self.settings = settings
        self.catalog = catalog
        self._endpoints = endpoints  # a local endpoint id -> where it answers (the facade gives client.serve's)
        self._sessions: dict[str, ChatSession | EndpointChatSession] = {}
        self._spare: SpareWorker | None = None
        self._lock = threading.Lock()

    def prewarm(self) -> bool:
        """Start a spare worker (torch and transformers imported, no model) unless one is waiting, so
        that the next chat with a model waits only for the model's load. The panel asks for one when
        its chat section lists the models. A spare nobody takes exits after the chat idle time.
        Returns whether this call started one."""
        with self._lock:
            if self._spare is not None and self._spare.alive:
                return False
            log_dir = self.settings.home / "chat"
            log_dir.mkdir(parents=True, exist_ok=True)
            spare_id = uuid.uuid4().hex[:12]
            log = log_dir / f"chat-spare-{spare_id}.log"
            worker = _start_worker(f"spare-{spare_id}", "-", self.settings.chat_idle_minutes * 60, log)
            self._spare = SpareWorker(worker, log)
            return True

    def _take_spare(self) -> SpareWorker | None:
        with self._lock:
            spare, self._spare = self._spare, None
        return spare if spare is not None and spare.alive else None

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

    def start(
        self, model: str | None = None, *, endpoint: str | None = None, token: str | None = None
    ) -> ChatSession | EndpointChatSession:
        """A chat with ``model`` in a worker of its own, or with a served ``endpoint``: a local endpoint
        id (``starverse serve ls``) or a URL with a ``token`` reference (``env:NAME``, ``file:PATH``)."""
        session: ChatSession | EndpointChatSession
        if endpoint is not None:
            if model:
                raise BadInputError("give a model or an endpoint, not both", field="endpoint",
                                    hint="the endpoint already names the model it serves")  # fmt: skip
            session = EndpointChatSession(self.target(endpoint, token))
        else:
            if token is not None:
                raise BadInputError("a token goes with an endpoint", field="token", hint="give --endpoint ID|URL")
            folder = resolve_model(self.settings, self.catalog, model or "")
            session = ChatSession(
                model or "",
                folder,
                log_dir=self.settings.home / "chat",
                idle_seconds=self.settings.chat_idle_minutes * 60,
                spare=self._take_spare(),
            )
        with self._lock:
            self._sessions[session.id] = session
        return session

    def target(self, endpoint: str, token: str | None = None) -> EndpointTarget:
        """Where ``endpoint`` answers: a URL as given, a local endpoint id through the facade."""
        if not isinstance(endpoint, str) or not endpoint.strip():
            raise BadInputError(
                "endpoint is empty", field="endpoint", hint="a local endpoint id or http://HOST:PORT/v1"
            )
        if endpoint.startswith(("http://", "https://")):
            return EndpointTarget.of_url(endpoint, token)
        if token is not None:
            raise BadInputError("a local endpoint's token is read from its run folder", field="token",
                                hint="leave out the token, or give the endpoint's URL")  # fmt: skip
        if self._endpoints is None:
            raise BadInputError(f"{endpoint!r} is not an endpoint URL", field="endpoint",
                                hint="give http://HOST:PORT/v1")  # fmt: skip
        return self._endpoints(endpoint)

    def get(self, session_id: str) -> ChatSession | EndpointChatSession:
        try:
            return self._sessions[session_id]
        except KeyError:
            raise NotFoundError(f"no chat session {session_id!r}", hint="start one with the model you want") from None

    def list(self) -> list[ChatSession | EndpointChatSession]:
        return list(self._sessions.values())

    def close(self, session_id: str | None = None) -> None:
        """Close one session, or (no id) every session and the spare worker."""
        with self._lock:
            ids = [session_id] if session_id else list(self._sessions)
            found = [self._sessions.pop(i) for i in ids if i in self._sessions]
            spare, self._spare = (self._spare, None) if session_id is None else (None, self._spare)
        if session_id and not found:
            raise NotFoundError(f"no chat session {session_id!r}", hint="it may have been closed already")
        for s in found:
            s.close()
        if spare is not None:
            spare.close()
