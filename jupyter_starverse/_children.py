"""Child processes of this process, by key: start, find, stop, idle exit and stop at exit.

:class:`Children` owns the ``Popen`` of each child it starts under a key (a TensorBoard board,
a chat worker, a served model): :meth:`~Children.start` runs it (own session, so a kernel
interrupt leaves it alone) and, given ``ready``, waits until it answers; :meth:`~Children.find`
gives the live child of a key (and counts as a use); :meth:`~Children.stop` ends it: a polite
step (SIGTERM, or closing its stdin for a child that ends on EOF), ``grace`` seconds, then
SIGKILL, and it is reaped. A child started with ``idle_seconds`` that nobody touched for that
long is stopped by one reaper thread; every child started with ``at_exit`` (the default) is
stopped when this process exits, all together under one grace. A child with ``at_exit=False``
(a served model, recorded on disk) outlives this process. Thread-safe; nothing here knows what
the children are: the services (experiments, feedback, serve) name them and read their output.
"""

from __future__ import annotations

import atexit
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from jupyter_starverse.errors import BackendUnavailableError

__all__ = ["Child", "ChildNotReady", "Children", "free_port", "port_open", "stop_processes", "wait_ready"]

#: What ``stdin``/``stdout``/``stderr`` of a child may be (as ``subprocess.Popen`` takes them).
Stream = int | IO[Any] | None


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on ``host`` now (the kernel's pick); the child binds it right after."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    """Whether something accepts connections on ``host:port``."""
    with socket.socket() as probe:
        probe.settimeout(timeout)
        return probe.connect_ex((host, port)) == 0


def wait_ready(
    ready: Callable[[], bool], *, alive: Callable[[], bool | None], timeout: float, poll: float = 0.2
) -> bool | None:
    """Poll until ``ready()``: True once it is, False when ``alive()`` says the process is gone first
    (``None`` from ``alive``: cannot tell, keep waiting), None when ``timeout`` seconds passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if alive() is False:
            return False
        if ready():
            return True
        time.sleep(poll)
    return None


def _wait_all(procs: Sequence[subprocess.Popen[Any]], grace: float) -> None:
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass


def _close_stdin(proc: subprocess.Popen[Any]) -> None:
    if proc.stdin is not None:
        try:
            proc.stdin.close()
        except OSError:
            pass


def stop_processes(
    procs: Sequence[subprocess.Popen[Any]], *, grace: float = 10.0, eof: Sequence[bool] = (), now: bool = False
) -> None:
    """End ``procs`` together and reap them: the polite step (SIGTERM; closing stdin for those whose
    ``eof`` is True, SIGTERM only after ``grace`` for them, or at once with ``now``), up to ``grace``
    seconds for all, then SIGKILL for whatever is left."""
    ends_on_eof = list(eof) + [False] * (len(procs) - len(eof))
    live = [(p, e) for p, e in zip(procs, ends_on_eof, strict=True) if p.poll() is None]
    for proc, on_eof in live:
        if now or not on_eof:
            proc.terminate()
        if on_eof:
            _close_stdin(proc)
    _wait_all([p for p, _ in live], grace)
    lingering = [p for p, on_eof in live if on_eof and not now and p.poll() is None]
    for proc in lingering:  # EOF did not end it: SIGTERM, as any other child
        proc.terminate()
    _wait_all(lingering, grace)
    for proc, _ in live:
        if proc.poll() is None:
            proc.kill()
    _wait_all([p for p, _ in live], grace)


class ChildNotReady(BackendUnavailableError):
    """A child that exited (``returncode`` set) or did not get ready in time (``returncode`` None)."""

    def __init__(self, message: str, *, returncode: int | None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.returncode = returncode


@dataclass(eq=False)
class Child:
    """One child process of a :class:`Children`: its ``Popen``, what it was started with, when it was last used."""

    key: str
    proc: subprocess.Popen[Any]
    owner: Children
    port: int | None = None
    meta: Any = None  # the caller's (a board's runs): what it was started for
    idle_seconds: float | None = None
    grace: float = 10.0
    ends_on_eof: bool = False
    at_exit: bool = True
    started_at: float = field(default_factory=time.monotonic)
    touched_at: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    def touch(self) -> None:
        """Count as a use now: idle exit waits ``idle_seconds`` from here."""
        self.touched_at = time.monotonic()

    def idle_for(self) -> float:
        return time.monotonic() - self.touched_at

    def wait_ready(self, ready: Callable[[], bool], timeout: float, poll: float = 0.2) -> bool | None:
        """:func:`wait_ready` on this child: True ready, False it exited first, None not within ``timeout``."""
        return wait_ready(ready, alive=lambda: self.alive, timeout=timeout, poll=poll)

    def stop(self, *, grace: float | None = None, now: bool = False) -> bool:
        """End it (see :func:`stop_processes`) and drop it from its owner; False when it had exited already."""
        self.owner._drop(self)
        was = self.alive
        stop_processes([self.proc], grace=self.grace if grace is None else grace, eof=[self.ends_on_eof], now=now)
        return was


class Children:
    """The child processes this process started, by key (one live child per key).

    ``name`` says what they are in messages; ``reap_every`` is how often the reaper thread looks
    for idle children (it runs only while one has ``idle_seconds``).
    """

    def __init__(self, name: str = "child", *, reap_every: float = 1.0) -> None:
        self.name = name
        self.reap_every = reap_every
        self._children: dict[str, Child] = {}
        self._lock = threading.Lock()
        self._reaper: threading.Thread | None = None
        atexit.register(self.stop_all, at_exit_only=True)

    def start(
        self,
        key: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        stdin: Stream = subprocess.DEVNULL,
        stdout: Stream = None,
        stderr: Stream = None,
        text: bool = False,
        ready: Callable[[Child], bool] | None = None,
        timeout: float = 60.0,
        idle_seconds: float | None = None,
        grace: float = 10.0,
        ends_on_eof: bool = False,
        at_exit: bool = True,
        port: int | None = None,
        meta: Any = None,
    ) -> Child:
        """Start ``argv`` as the child of ``key`` (a live child of that key is stopped first).

        With ``ready``, return once ``ready(child)`` is true; a child that exits first, or is not
        ready within ``timeout``, is stopped and :class:`ChildNotReady` raised. ``idle_seconds``:
        stopped after that long without :meth:`find` or :meth:`Child.touch`. ``ends_on_eof``: the
        child ends when its stdin closes (a pipe), so stopping it closes stdin before any signal.
        """
        old = self.find(key, touch=False)
        if old is not None:
            old.stop()
        proc = subprocess.Popen(
            list(argv), stdin=stdin, stdout=stdout, stderr=stderr, env=dict(env) if env is not None else None,
            cwd=cwd, text=text, encoding="utf-8" if text else None, start_new_session=True,
        )  # fmt: skip
        child = Child(key, proc, self, port, meta, idle_seconds, grace, ends_on_eof, at_exit)
        with self._lock:
            for gone in [k for k, c in self._children.items() if not c.alive]:
                del self._children[gone]  # reaped (no zombie left in a long-lived process) and forgotten
            replaced = self._children.get(key)
            self._children[key] = child
            if idle_seconds is not None and (self._reaper is None or not self._reaper.is_alive()):
                self._reaper = threading.Thread(target=self._reap, name=f"{self.name}-reaper", daemon=True)
                self._reaper.start()
        if replaced is not None:  # another thread started one for the key meanwhile: one child per key
            replaced.stop()
        if ready is None:
            return child
        got = child.wait_ready(lambda: ready(child), timeout)
        if got:
            return child
        child.stop()
        if got is False:
            raise ChildNotReady(f"the {self.name} {key!r} exited with code {proc.returncode} before it was ready",
                                returncode=proc.returncode, hint="see its output")  # fmt: skip
        raise ChildNotReady(f"the {self.name} {key!r} was not ready within {timeout:g} s", returncode=None,
                            hint="see its output")  # fmt: skip

    def find(self, key: str, *, touch: bool = True) -> Child | None:
        """The live child of ``key`` (None: none, or it exited: then it is reaped and forgotten)."""
        with self._lock:
            child = self._children.get(key)
            if child is not None and not child.alive:
                del self._children[key]
                child = None
        if child is not None and touch:
            child.touch()
        return child

    def keys(self) -> list[str]:
        """The keys of the live children."""
        with self._lock:
            return [k for k, c in self._children.items() if c.alive]

    def stop(self, key: str, *, grace: float | None = None) -> bool:
        """Stop the child of ``key`` (one that exited is reaped and forgotten); False when it had none."""
        with self._lock:
            child = self._children.get(key)
        if child is None:
            return False
        child.stop(grace=grace)
        return True

    def stop_all(self, *, at_exit_only: bool = False, grace: float | None = None) -> None:
        """Stop every child together (``at_exit_only``: those started with ``at_exit``, as at exit)."""
        with self._lock:
            chosen = [c for c in self._children.values() if c.at_exit or not at_exit_only]
            for c in chosen:
                del self._children[c.key]
        if chosen:
            wait = max(c.grace for c in chosen) if grace is None else grace
            stop_processes([c.proc for c in chosen], grace=wait, eof=[c.ends_on_eof for c in chosen])

    def _drop(self, child: Child) -> None:
        with self._lock:
            if self._children.get(child.key) is child:
                del self._children[child.key]

    def _reap(self) -> None:
        """The reaper: stops children idle past their ``idle_seconds``, forgets exited ones; ends when
        no child has an idle time."""
        while True:
            time.sleep(self.reap_every)
            with self._lock:
                for key in [k for k, c in self._children.items() if not c.alive]:
                    del self._children[key]
                idle = [c for c in self._children.values() if c.idle_seconds is not None]
                if not idle:
                    self._reaper = None
                    return
            for child in idle:
                if child.idle_seconds is not None and child.idle_for() >= child.idle_seconds:
                    child.stop()
