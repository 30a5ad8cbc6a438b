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
import logging
import os
import secrets
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_starverse._volume import GROUP, PRIVATE, Modes, group_id, make_dir, write_atomic
from jupyter_starverse.errors import InvalidNameError, NotFoundError, PermissionDeniedError, did_you_mean

from ._journal import note_change
from ._modes import _existing, _shared, folder_modes

__all__ = [
    "ExperimentPaths",
    "RunPaths",
    "find_run",
    "folder_modes",
    "list_runs",
    "new_job_id",
    "read_json",
    "read_record",
    "run_modes",
    "trusted_record",
    "write_json",
]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


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

    @property
    def owner(self) -> int:
        """The uid that owns the run folder (``lstat``): whose job it is."""
        return os.lstat(self.root).st_uid

    def make(self, modes: Modes | None = None, *, gid: int | None = None) -> None:
        """Create the run folder and its sub-folders with ``modes`` (default: :func:`run_modes`).

        Group mode: every folder 2770 (``runs/`` also sticky: nobody renames another's run),
        given to ``gid`` when set. Otherwise 0700: nobody else reads the run.
        """
        if modes is None:
            modes, gid = run_modes(self.root.parent.parent.parent)
        experiments = self.root.parent.parent.parent
        try:
            for folder in (self.root.parent.parent, self.root.parent):
                created = not folder.is_dir()
                make_dir(folder, modes)
                if created:
                    _give_group(folder, gid, modes)
                    if folder.name == "runs" and modes is GROUP:
                        with contextlib.suppress(OSError):
                            folder.chmod(modes.folder | stat.S_ISVTX)
            make_dir(self.root, modes, root=experiments)
            _give_group(self.root, gid, modes)
            for d in (self.logs, self.pids, self.errors):
                make_dir(d, modes, root=experiments)
        except PermissionError as e:
            raise PermissionDeniedError(
                f"cannot create the run folder {self.root}: {e.strerror}",
                hint="the experiment belongs to another user; choose another experiment name, or share the "
                "experiments root with STARVERSE_SHARED_GROUP (docs/sharing.md)",
            ) from None


def new_job_id(name: str) -> str:
    """``<name>-<utc time>-<8 hex>``: sortable by creation, unique across processes."""
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(4)}"


def find_run(experiments: Path, job_id: str) -> RunPaths:
    """The run folder of ``job_id`` under any experiment; ``NotFoundError`` if none."""
    _check_name(job_id, "job id")
    root = Path(experiments)
    if root.is_dir():
        for exp in root.iterdir():
            candidate = exp / "runs" / job_id
            with contextlib.suppress(OSError):
                folders = all(_plain_folder(f) for f in (exp, exp / "runs", candidate))
                if folders and stat.S_ISREG(os.lstat(candidate / "spec.json").st_mode):
                    return RunPaths(candidate)
    known: list[str] = []
    with contextlib.suppress(OSError):
        known = [run.name for exp in root.iterdir() if (exp / "runs").is_dir() for run in (exp / "runs").iterdir()]
    raise NotFoundError(
        f"no job {job_id!r} under {root}", hint=did_you_mean(job_id, known) + "list jobs with `starverse jobs ls`"
    )


def list_runs(experiments: Path) -> list[RunPaths]:
    """Every run folder that has a spec, newest first (by creation time in the id)."""
    root = Path(experiments)
    if not root.is_dir():
        return []
    runs = []
    for p in root.glob("*/runs/*/spec.json"):
        with contextlib.suppress(OSError):  # a linked experiment, runs/ or run folder is not listed
            if all(_plain_folder(f) for f in (p.parent.parent.parent, p.parent.parent, p.parent)):
                runs.append(RunPaths(p.parent))
    return sorted(runs, key=lambda r: _created(r), reverse=True)


def _plain_folder(path: Path) -> bool:
    """A real folder, not a link to one."""
    return stat.S_ISDIR(os.lstat(path).st_mode)


def _created(run: RunPaths) -> float:
    try:
        return run.spec.stat().st_mtime
    except OSError:
        return 0.0


def run_modes(experiments: Path, shared_group: str | None = None) -> tuple[Modes, int | None]:
    """Modes (and group) of a new run folder: ``GROUP`` when the root is shared, else ``PRIVATE``.

    Shared means ``STARVERSE_SHARED_GROUP`` is set (its gid is returned, the folders are given
    to it) or the experiments root (or the experiment's folder) is setgid.
    """
    gid = group_id(shared_group)
    if gid is not None:
        return GROUP, gid
    return (GROUP if _shared(_existing(experiments)) else PRIVATE), None


def _give_group(folder: Path, gid: int | None, modes: Modes) -> None:
    """Hand a folder of ours to the shared group (we belong to it) and set its mode again."""
    if gid is None:
        return
    with contextlib.suppress(OSError):
        st = os.lstat(folder)
        if st.st_uid == os.geteuid() and stat.S_ISDIR(st.st_mode):
            if st.st_gid != gid:
                os.chown(folder, -1, gid)
            folder.chmod(modes.folder | (stat.S_ISVTX if folder.name == "runs" else 0))


def _make_dir(path: Path, modes: Modes | None = None) -> None:
    """``mkdir -p`` with the modes of the nearest existing folder (or ``modes``), whatever the umask."""
    make_dir(path, modes or folder_modes(path))


def _to_bytes(data: Any) -> bytes:
    return (json.dumps(data, indent=1, sort_keys=True) + "\n").encode()


def write_json(path: Path, data: Any, *, gid: int | None = None, mode: int | None = None) -> None:
    """Write JSON atomically (temp file + rename): readers never see half a file.

    The file gets the mode of its folder (:func:`folder_modes`: 0600 in a private run folder,
    0640 in a group one) whatever the umask, and a link planted at ``path`` is replaced, never
    written through. ``gid`` (a group we belong to) and ``mode``: a record another identity must
    recognise, e.g. a cancel by a member of the admin group.
    """
    _make_dir(path.parent)
    modes = folder_modes(path.parent)
    if gid is None:
        write_atomic(path, _to_bytes(data), mode if mode is not None else modes.file)
    else:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                os.fchown(f.fileno(), -1, gid)
                os.fchmod(f.fileno(), mode if mode is not None else 0o644)
                f.write(_to_bytes(data))
            Path(tmp).replace(path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    note_change(path)  # a run's spec/status/record: the job index re-reads that run


_log = logging.getLogger("jupyter_starverse")
_WARNED: set[tuple[str, int]] = set()


def _warn_once(path: Path, uid: int, what: str) -> None:
    key = (str(path), uid)
    if key in _WARNED:
        return
    if len(_WARNED) > 10_000:
        _WARNED.clear()
    _WARNED.add(key)
    _log.warning("%s: %s; ignored", path, what)


def run_root_of(path: Path) -> Path:
    """The run folder a record lies in (``<experiments>/<experiment>/runs/<id>/...``), else its folder."""
    p = Path(path).parent
    for candidate in (p, *p.parents):
        if candidate.parent.name == "runs":
            return candidate
    return Path(path).parent


def trusted_record(path: Path, *, owner: int | None = None, admin_gid: int | None = None) -> bool:
    """Whether ``path`` may be believed: written by the run folder's owner (or root, or the admin group).

    In a group-shared run folder other members can create files; what they wrote is data of
    theirs, not the job's record (a forged ``status.json``, ``cost.json``, ``cancel.json``,
    pid file). ``admin_gid``: a record whose group is the admin group (only its members can give a
    file that group) is believed too: a cancel or preemption by an administrator. A missing file
    is not trusted; a link never is.
    """
    try:
        st = os.lstat(path)
        if owner is None:
            owner = os.lstat(run_root_of(path)).st_uid
    except OSError:
        return False
    if stat.S_ISLNK(st.st_mode):
        _warn_once(path, st.st_uid, "a symbolic link where a record should be")
        return False
    if st.st_uid in (owner, 0) or (admin_gid is not None and st.st_gid == admin_gid):
        return True
    _warn_once(path, st.st_uid, f"written by uid {st.st_uid}, not by the run's owner (uid {owner})")
    return False


def read_record(path: Path, *, owner: int | None = None, admin_gid: int | None = None) -> Any:
    """:func:`read_json` of a record, or ``None`` when it is missing, not JSON, or not trusted."""
    if not trusted_record(path, owner=owner, admin_gid=admin_gid):
        return None
    try:
        return read_json(path)
    except (OSError, ValueError):
        return None


def read_json(path: Path) -> Any:
    """Read a JSON file written by :func:`write_json`; ``None`` if it does not exist.

    A link is not followed (``O_NOFOLLOW``: refused with ``OSError``); a file that is not JSON
    raises ``ValueError``.
    """
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as f:
        return json.loads(f.read())
