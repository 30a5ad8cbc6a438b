"""The process service: long-lived child processes of this host, each with a run folder of its own.

``Processes(root, kind)`` starts a command detached from its caller (own session, stdin closed,
output to ``log``), so a kernel restart or a server stop loses nothing; the folder holds what any
other process needs to find and stop it: ``spec.json`` (what was asked), ``pid.json``
(:func:`~jupyter_starverse._procs.process_record`: host, boot, start time, so a reused pid is
never signalled), the log, and ``stopped.json`` once it was stopped. Folders are private
(0700/0600). A handler, a magic or the CLI never owns the process: they all go through here.
The ``Popen`` of each process started here is a child of :data:`SERVED` (the
:class:`~jupyter_starverse._children.Children` service, ``at_exit=False``: it outlives this
process), so this process stops and reaps its own; one started by another process is stopped by
its recorded pid.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_starverse._children import Children
from jupyter_starverse._procs import ProcessRecord, alive, process_record, stop_pids
from jupyter_starverse._volume import PRIVATE, make_dir, write_atomic
from jupyter_starverse.errors import BadInputError, NotFoundError

__all__ = ["SERVED", "ProcessFolder", "Processes"]

#: The processes this process started, keyed by run folder (one per process: any ``Processes`` of
#: a root reaps what another one of this process started there).
SERVED = Children("served process")

_ID_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-")


def _key(f: ProcessFolder) -> str:
    """The key of a folder's process in :data:`SERVED`: its absolute path, however the root was spelled."""
    return str(f.root.absolute())


@dataclass(frozen=True)
class ProcessFolder:
    """One child process's run folder."""

    id: str
    root: Path

    @property
    def spec(self) -> Path:
        return self.root / "spec.json"

    @property
    def pid(self) -> Path:
        return self.root / "pid.json"

    @property
    def log(self) -> Path:
        return self.root / "logs" / "server.log"

    @property
    def stopped(self) -> Path:
        return self.root / "stopped.json"

    def read(self, name: str) -> dict[str, Any]:
        """A JSON record of the folder (``{}`` when absent or not ours to trust: a link is refused)."""
        try:
            fd = os.open(self.root / name, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return {}
        with os.fdopen(fd, encoding="utf-8") as f:
            try:
                data = json.load(f)
            except ValueError:
                return {}
        return data if isinstance(data, dict) else {}

    def write(self, name: str, data: Mapping[str, Any]) -> None:
        write_atomic(self.root / name, json.dumps(dict(data), indent=2, ensure_ascii=False).encode(), 0o600)

    def record(self) -> ProcessRecord | None:
        return ProcessRecord.from_json(self.read("pid.json"))

    def alive(self) -> bool | None:
        """Whether the process runs (None: it runs on another host, this one cannot tell)."""
        rec = self.record()
        return False if rec is None else alive(rec)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class Processes:
    """The child processes of one ``kind`` under ``root`` (``<experiments>/.serve``)."""

    def __init__(self, root: Path, kind: str) -> None:
        self.root = Path(root)
        self.kind = kind

    def folder(self, proc_id: str) -> ProcessFolder:
        if not isinstance(proc_id, str) or not proc_id or len(proc_id) > 100 or not set(proc_id) <= _ID_CHARS:
            raise BadInputError(f"{proc_id!r} is not a {self.kind} id", field="id",
                                hint=f"see `starverse {self.kind} ls`")  # fmt: skip
        f = ProcessFolder(proc_id, self.root / proc_id)
        if not f.spec.is_file():
            raise NotFoundError(f"no {self.kind} {proc_id!r}", hint=f"see `starverse {self.kind} ls`")
        return f

    def new(self, name: str, spec: Mapping[str, Any]) -> ProcessFolder:
        """A new private run folder with ``spec.json``."""
        stem = "".join(c if c in _ID_CHARS else "-" for c in name.lower()).strip("-")[:40] or self.kind
        proc_id = f"{stem}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(4)}"
        f = ProcessFolder(proc_id, self.root / proc_id)
        make_dir(self.root, PRIVATE)
        make_dir(f.log.parent, PRIVATE, root=self.root)
        f.write("spec.json", {"kind": self.kind, "id": proc_id, "created_at": time.time(), **spec})
        return f

    def start(self, f: ProcessFolder, argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> ProcessRecord:
        """Start ``argv`` detached, its output to the folder's log; records and returns its pid."""
        fd = os.open(f.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "ab") as log:  # stdin closed, own session: a kernel interrupt leaves it alone
            child = SERVED.start(_key(f), argv, stdout=log, stderr=log, cwd=f.root, env=env, at_exit=False)
        rec = process_record(child.pid)
        f.write("pid.json", rec.to_json())
        return rec

    def ls(self) -> list[ProcessFolder]:
        """Every run folder, newest first."""
        if not self.root.is_dir():
            return []
        out = [ProcessFolder(p.name, p) for p in self.root.iterdir()
               if not p.is_symlink() and p.is_dir() and (p / "spec.json").is_file()]  # fmt: skip
        return sorted(out, key=lambda f: f.read("spec.json").get("created_at") or 0, reverse=True)

    def stop(self, f: ProcessFolder, *, grace: float = 10.0, reason: str = "stopped") -> bool:
        """SIGTERM (then SIGKILL after ``grace``) the recorded process if it is still that process:
        this process's own child through :data:`SERVED` (so it is reaped), another's by its pid."""
        rec = f.record()
        was = rec is not None and alive(rec) is True
        child = SERVED.find(_key(f), touch=False)  # one that exited is reaped here
        if child is not None and rec is not None and child.pid == rec.pid:
            child.stop(grace=grace)
        elif was and rec is not None:
            stop_pids([rec.pid], grace=grace)
        if not f.stopped.exists():
            f.write("stopped.json", {"at": time.time(), "reason": reason, "was_running": was})
        return was
