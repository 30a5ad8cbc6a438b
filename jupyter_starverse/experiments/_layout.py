"""Where a run's files live: one folder per experiment, one sub-folder per run.

::

    <experiments>/<experiment>/
        runs/<job_id>/
            spec.json  plan.json  status.json  cancel.json
            checkpoints/step-00000040/   (a resumed run starts from the newest of any run)
            logs/rank0.log ... logs/node0.log ...
            pids/rank0.json ...  errors/rank1.json ...   (the attempt that runs now)
            errors/attempt-0/rank1.json  stops/attempt-0/rank0.json   (earlier attempts, kept apart)
            stops/rank0.json ...   (a rank stopped by SIGTERM: when, at which step, checkpoint)
            metrics.jsonl  ranks/rank1.jsonl ...  (every rank's own speed and loss)  tensorboard/  wandb/

The run folder is the job's truth: any process reading it sees the same job.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_starverse.errors import InvalidNameError, NotFoundError

from ._index import note_change

__all__ = ["ExperimentPaths", "RunPaths", "find_run", "list_runs", "new_job_id", "read_json", "write_json"]


def _check_name(name: str, what: str) -> str:
    if not name or "/" in name or "\\" in name or name in (".", "..") or name.startswith("."):
        raise InvalidNameError(f"{what} {name!r} is not a valid name", hint="use letters, digits, '.', '_' or '-'")
    return name


@dataclass(frozen=True)
class ExperimentPaths:
    """Paths of one experiment (shared by its runs)."""

    root: Path

    @classmethod
    def of(cls, experiments: Path, name: str) -> ExperimentPaths:
        return cls(Path(experiments) / _check_name(name, "experiment"))

    @property
    def name(self) -> str:
        return self.root.name

    @property
    def runs(self) -> Path:
        return self.root / "runs"

    def run(self, job_id: str) -> RunPaths:
        return RunPaths(self.runs / _check_name(job_id, "job id"))


@dataclass(frozen=True)
class RunPaths:
    """Paths inside one run folder (``STARVERSE_EXPERIMENT_DIR`` of its processes)."""

    root: Path

    @property
    def job_id(self) -> str:
        return self.root.name

    @property
    def experiment(self) -> ExperimentPaths:
        return ExperimentPaths(self.root.parent.parent)

    @property
    def spec(self) -> Path:
        return self.root / "spec.json"

    @property
    def plan(self) -> Path:
        return self.root / "plan.json"

    @property
    def status(self) -> Path:
        return self.root / "status.json"

    @property
    def cancel(self) -> Path:
        return self.root / "cancel.json"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def pids(self) -> Path:
        return self.root / "pids"

    @property
    def errors(self) -> Path:
        return self.root / "errors"

    @property
    def stops(self) -> Path:
        """Records of ranks that stopped on a SIGTERM (``stops/rankN.json``, written by the runtime)."""
        return self.root / "stops"

    @property
    def preempt(self) -> Path:
        """A preemption drill asked for (``jobs preempt``); the supervisor acts on it."""
        return self.root / "preempt.json"

    def attempt_dir(self, folder: Path, attempt: int) -> Path:
        """Where ``folder`` (``errors``, ``stops``) of an earlier ``attempt`` is kept."""
        return folder / f"attempt-{attempt}"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def tensorboard(self) -> Path:
        return self.root / "tensorboard"

    @property
    def wandb(self) -> Path:
        return self.root / "wandb"

    @property
    def script(self) -> Path:
        return self.root / "train.py"

    def rank_log(self, rank: int) -> Path:
        return self.logs / f"rank{rank}.log"

    def node_log(self, node: int) -> Path:
        return self.logs / f"node{node}.log"

    def make(self) -> None:
        for d in (self.root, self.logs, self.pids, self.errors):
            _make_dir(d)


def new_job_id(name: str) -> str:
    """``<name>-<utc time>-<4 hex>``: sortable by creation, unique across processes."""
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(2)}"


def find_run(experiments: Path, job_id: str) -> RunPaths:
    """The run folder of ``job_id`` under any experiment; ``NotFoundError`` if none."""
    _check_name(job_id, "job id")
    root = Path(experiments)
    if root.is_dir():
        for exp in root.iterdir():
            candidate = exp / "runs" / job_id
            if (candidate / "spec.json").is_file():
                return RunPaths(candidate)
    raise NotFoundError(f"no job {job_id!r} under {root}", hint="list jobs with `starverse jobs ls`")


def list_runs(experiments: Path) -> list[RunPaths]:
    """Every run folder that has a spec, newest first (by creation time in the id)."""
    root = Path(experiments)
    if not root.is_dir():
        return []
    runs = [RunPaths(p.parent) for p in root.glob("*/runs/*/spec.json")]
    return sorted(runs, key=lambda r: _created(r), reverse=True)


def _created(run: RunPaths) -> float:
    try:
        return run.spec.stat().st_mtime
    except OSError:
        return 0.0


def _umask() -> int:
    """The process umask, read without changing it where Linux allows (threads may be writing)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _shared(folder: Path) -> bool:
    """True when ``folder`` is setgid: the experiments root is shared by a group (docs/sharing.md)."""
    try:
        return bool(folder.stat().st_mode & stat.S_ISGID)
    except OSError:
        return False


def _make_dir(path: Path) -> None:
    """``mkdir -p``; folders created in a setgid (group-shared) folder become 2770 + the umask's other bits."""
    missing = []
    p = path
    while not p.is_dir() and p.parent != p:
        missing.append(p)
        p = p.parent
    for folder in reversed(missing):
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        if _shared(folder.parent):
            with contextlib.suppress(OSError):
                folder.chmod(0o2770 | (0o005 & ~_umask()))


def _file_mode(folder: Path) -> int:
    """What ``open()`` would give (0644 under umask 022), and always group-readable in a shared folder."""
    mode = 0o666 & ~_umask()
    return mode | 0o040 if _shared(folder) else mode


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (temp file + rename): readers never see half a file.

    The file gets the mode a plain ``open()`` gives (mkstemp's 0600 would hide a job's spec
    and status from the other users of a shared experiments folder).
    """
    _make_dir(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), _file_mode(path.parent))
            json.dump(data, f, indent=1, sort_keys=True)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    note_change(path)  # a run's spec/status/record: the job index re-reads that run


def read_json(path: Path) -> Any:
    """Read a JSON file written by :func:`write_json`; ``None`` if it does not exist."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
