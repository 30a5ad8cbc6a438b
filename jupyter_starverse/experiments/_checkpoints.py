"""Checkpoints of an experiment and the plan to resume from them.

A checkpoint is a folder ``<run>/checkpoints/step-<8 digits>/`` written with
``torch.distributed.checkpoint`` by every rank, plus ``meta.json`` written by rank 0.
After the folder got its final name, rank 0 records it in the run's own checkpoint record
``<run>/checkpoints/index.json`` (step, world size, time, job id and the SHA-256 of the DCP
``.metadata`` pickle), written atomically.

The experiments folder may be shared, so what other users put there is untrusted input:
loading a DCP checkpoint unpickles its ``.metadata``. A checkpoint is *trusted* (listed,
resumed from) only when

* its run folder (and ``spec.json`` there) belongs to this user (effective uid);
* its ``checkpoints`` folder, the record, the checkpoint folder and every file in it belong
  to this user, are not symbolic links and are not writable by group or others;
* the run's record lists it, and its ``.metadata`` still has the recorded SHA-256.

Everything else is reported as an :class:`IgnoredCheckpoint` with the reason, never read
beyond ``stat``. Checkpoints are ranked by what the records say (time, then step), never by
anything inside a checkpoint folder. The checks open each folder once and ``fstat`` what
they opened, so a folder renamed while it is checked cannot slip in; a loader keeps the
verified folder open (:func:`open_trusted_checkpoint`) and reads it through that handle.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_starverse.errors import NotFoundError, PermissionDeniedError

from ._layout import ExperimentPaths, RunPaths, write_json

__all__ = [
    "CHECKPOINT_INDEX",
    "Checkpoint",
    "CheckpointScan",
    "IgnoredCheckpoint",
    "ResumePlan",
    "checkpoint_name",
    "latest_checkpoint",
    "list_checkpoints",
    "open_trusted_checkpoint",
    "plan_resume",
    "record_checkpoint",
    "scan_checkpoints",
    "verify_checkpoint",
]

CHECKPOINT_INDEX = "index.json"
"""The run's own record of the checkpoints it wrote, inside its ``checkpoints`` folder."""

_STEP_DIR = re.compile(r"^step-(\d{8,})$")
_METADATA = ".metadata"  # the DCP metadata: a pickle, unpickled by every load
_SHARED_WRITE = stat.S_IWGRP | stat.S_IWOTH
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_FILE_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def checkpoint_name(step: int) -> str:
    """Folder name of the checkpoint taken after ``step``."""
    return f"step-{step:08d}"


@dataclass(frozen=True)
class Checkpoint:
    """A trusted checkpoint: the step it was taken after and the world size that wrote it."""

    step: int
    path: Path
    world_size: int
    time: float
    job_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "path": str(self.path),
            "world_size": self.world_size,
            "time": self.time,
            "job_id": self.job_id,
        }


@dataclass(frozen=True)
class IgnoredCheckpoint:
    """A checkpoint folder that is never loaded, and why (``step`` is what its name claims)."""

    path: Path
    step: int | None
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "step": self.step, "reason": self.reason}

    def __str__(self) -> str:
        return f"{self.path} ({self.reason})"


@dataclass(frozen=True)
class CheckpointScan:
    """Trusted checkpoints (oldest first, by their runs' records) and the folders ignored."""

    trusted: tuple[Checkpoint, ...] = ()
    ignored: tuple[IgnoredCheckpoint, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"trusted": [c.to_json() for c in self.trusted], "ignored": [i.to_json() for i in self.ignored]}


class _Untrusted(Exception):
    """Why a folder or file fails the ownership checks."""


@dataclass(frozen=True)
class _Record:
    name: str
    step: int
    world_size: int
    time: float
    job_id: str | None
    metadata_sha256: str

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "step": self.step,
            "world_size": self.world_size,
            "time": self.time,
            "job_id": self.job_id,
            "metadata_sha256": self.metadata_sha256,
        }

    @classmethod
    def from_json(cls, data: Any) -> _Record | None:
        try:
            name = str(data["name"])
            if not _STEP_DIR.match(name):
                return None
            job_id = data.get("job_id")
            return cls(
                name,
                int(data["step"]),
                int(data.get("world_size", 0)),
                float(data.get("time", 0.0)),
                str(job_id) if job_id is not None else None,
                str(data["metadata_sha256"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            return None


def _check(info: os.stat_result, what: str, *, folder: bool, private: bool = True) -> None:
    uid = os.geteuid()
    if stat.S_ISLNK(info.st_mode):
        raise _Untrusted(f"{what} is a symbolic link")
    if folder and not stat.S_ISDIR(info.st_mode):
        raise _Untrusted(f"{what} is not a folder")
    if not folder and not stat.S_ISREG(info.st_mode):
        raise _Untrusted(f"{what} is not a regular file")
    if info.st_uid != uid:
        raise _Untrusted(f"{what} belongs to uid {info.st_uid}, not to this user (uid {uid})")
    if private and info.st_mode & _SHARED_WRITE:
        raise _Untrusted(f"{what} is writable by group or others (mode {stat.S_IMODE(info.st_mode):o})")


def _open(name: str | Path, what: str, *, dir_fd: int | None = None, folder: bool, private: bool = True) -> int:
    """Open without following a final symbolic link and check what was opened."""
    try:
        fd = os.open(name, _DIR_FLAGS if folder else _FILE_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as err:  # ELOOP: a symbolic link; ENOTDIR: not a folder
        with suppress(OSError):
            _check(os.stat(name, dir_fd=dir_fd, follow_symlinks=False), what, folder=folder, private=private)
        raise _Untrusted(f"{what} cannot be opened safely ({err.strerror})") from None
    try:
        _check(os.fstat(fd), what, folder=folder, private=private)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def _sha256(fd: int) -> str:
    digest = hashlib.sha256()
    while chunk := os.read(fd, 1 << 20):
        digest.update(chunk)
    return digest.hexdigest()


def _open_root(root: Path) -> tuple[int, dict[str, _Record]]:
    """Check the run folder of ``root`` and ``root`` itself; return ``root``'s fd and its record."""
    run_fd = _open(root.parent, "the run folder", folder=True, private=False)
    try:
        with suppress(FileNotFoundError):
            _check(
                os.stat("spec.json", dir_fd=run_fd, follow_symlinks=False),
                "the run's spec.json",
                folder=False,
                private=False,
            )
        root_fd = _open(root.name, "the run's checkpoints folder", dir_fd=run_fd, folder=True)
    finally:
        os.close(run_fd)
    try:
        return root_fd, _read_records(root_fd)
    except BaseException:
        os.close(root_fd)
        raise


def _read_records(root_fd: int) -> dict[str, _Record]:
    try:
        fd = _open(CHECKPOINT_INDEX, f"the checkpoint record {CHECKPOINT_INDEX}", dir_fd=root_fd, folder=False)
    except FileNotFoundError:
        return {}
    try:
        raw = _read_all(fd)
    finally:
        os.close(fd)
    try:
        data = json.loads(raw)
    except ValueError:
        raise _Untrusted(f"the checkpoint record {CHECKPOINT_INDEX} is not valid JSON") from None
    entries = data.get("checkpoints") if isinstance(data, dict) else None
    records = [_Record.from_json(e) for e in entries] if isinstance(entries, list) else []
    return {r.name: r for r in records if r is not None}


def _open_step(root_fd: int, rec: _Record) -> int:
    """Open and check the checkpoint folder ``rec.name``: every file ours, metadata as recorded."""
    fd = _open(rec.name, "the checkpoint folder", dir_fd=root_fd, folder=True)
    try:
        for entry in os.listdir(fd):  # noqa: PTH208 (a folder fd: what was checked, not a path)
            _check(os.stat(entry, dir_fd=fd, follow_symlinks=False), f"its file {entry}", folder=False)
        try:
            meta_fd = _open(_METADATA, f"its {_METADATA}", dir_fd=fd, folder=False)
        except FileNotFoundError:
            raise _Untrusted(f"it has no {_METADATA}") from None
        try:
            digest = _sha256(meta_fd)
        finally:
            os.close(meta_fd)
        if digest != rec.metadata_sha256:
            raise _Untrusted(f"its {_METADATA} is not the one the run recorded")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _step_of(name: str) -> int | None:
    m = _STEP_DIR.match(name)
    return int(m.group(1)) if m else None


def _scan_root(root: Path, trusted: list[tuple[float, int, int, Checkpoint]], ignored: list[IgnoredCheckpoint]) -> None:
    try:
        names = sorted(p.name for p in root.iterdir() if _STEP_DIR.match(p.name))
    except OSError:
        return
    if not names:
        return
    try:
        root_fd, records = _open_root(root)
    except (_Untrusted, FileNotFoundError) as err:
        why = str(err) if isinstance(err, _Untrusted) else "its run folder is gone"
        ignored.extend(IgnoredCheckpoint(root / n, _step_of(n), why) for n in names)
        return
    try:
        order = {name: i for i, name in enumerate(records)}
        for name in names:
            rec = records.get(name)
            if rec is None:
                why = f"not in its run's checkpoint record {CHECKPOINT_INDEX}"
                ignored.append(IgnoredCheckpoint(root / name, _step_of(name), why))
                continue
            try:
                os.close(_open_step(root_fd, rec))
            except (_Untrusted, FileNotFoundError) as err:
                why = str(err) if isinstance(err, _Untrusted) else "it is gone"
                ignored.append(IgnoredCheckpoint(root / name, rec.step, why))
                continue
            ckpt = Checkpoint(rec.step, root / name, rec.world_size, rec.time, rec.job_id)
            trusted.append((rec.time, rec.step, order[name], ckpt))
    finally:
        os.close(root_fd)


def _roots(path: Path | ExperimentPaths | RunPaths) -> list[Path]:
    base = path.root if isinstance(path, (ExperimentPaths, RunPaths)) else Path(path)
    roots = [base / "checkpoints"]
    if (base / "runs").is_dir():
        roots += [run / "checkpoints" for run in sorted((base / "runs").iterdir())]
    return [r for r in roots if r.is_dir()]


def scan_checkpoints(path: Path | ExperimentPaths | RunPaths) -> CheckpointScan:
    """Trusted checkpoints of a run folder or of every run of an experiment, and the ignored folders."""
    trusted: list[tuple[float, int, int, Checkpoint]] = []
    ignored: list[IgnoredCheckpoint] = []
    for root in _roots(path):
        _scan_root(root, trusted, ignored)
    trusted.sort(key=lambda t: t[:3])
    return CheckpointScan(tuple(t[3] for t in trusted), tuple(ignored))


def list_checkpoints(path: Path | ExperimentPaths | RunPaths) -> list[Checkpoint]:
    """Trusted checkpoints of a run folder, or of every run of an experiment; oldest first."""
    return list(scan_checkpoints(path).trusted)


def latest_checkpoint(path: Path | ExperimentPaths | RunPaths) -> Checkpoint | None:
    """The newest trusted checkpoint of a run folder or of any run of an experiment."""
    found = scan_checkpoints(path).trusted
    return found[-1] if found else None


@contextmanager
def open_trusted_checkpoint(path: Path) -> Iterator[tuple[Checkpoint, Path]]:
    """Check the checkpoint folder ``path`` and keep it open while the block runs.

    Yields the checkpoint and a path to read it through: on Linux ``/proc/self/fd/N`` of
    the verified folder, so renaming folders after the check cannot swap what is read.
    ``PermissionDeniedError`` (naming the folder and why) when it is not trusted,
    ``NotFoundError`` when it is gone. Nothing inside it is read but the ``.metadata`` bytes.
    """
    path = Path(path)
    hint = "resume only from checkpoints your own runs wrote (launch without --resume to start afresh)"
    try:
        root_fd, records = _open_root(path.parent)
    except FileNotFoundError:
        raise NotFoundError(f"checkpoint {path} is incomplete or gone", hint="launch without resume") from None
    except _Untrusted as err:
        raise PermissionDeniedError(f"refusing to load checkpoint {path}: {err}", hint=hint) from None
    try:
        rec = records.get(path.name)
        if rec is None:
            if not (path.parent / path.name).exists():
                raise NotFoundError(f"checkpoint {path} is incomplete or gone", hint="launch without resume")
            raise PermissionDeniedError(
                f"refusing to load checkpoint {path}: not in its run's checkpoint record {CHECKPOINT_INDEX}", hint=hint
            )
        try:
            fd = _open_step(root_fd, rec)
        except FileNotFoundError:
            raise NotFoundError(f"checkpoint {path} is incomplete or gone", hint="launch without resume") from None
        except _Untrusted as err:
            raise PermissionDeniedError(f"refusing to load checkpoint {path}: {err}", hint=hint) from None
    finally:
        os.close(root_fd)
    try:
        through = Path(f"/proc/self/fd/{fd}")
        yield (
            Checkpoint(rec.step, path, rec.world_size, rec.time, rec.job_id),
            through if through.is_dir() else path,
        )
    finally:
        os.close(fd)


def verify_checkpoint(path: Path) -> Checkpoint:
    """The checkpoint at ``path`` if it is trusted, else ``PermissionDeniedError`` naming it."""
    with open_trusted_checkpoint(path) as (ckpt, _):
        return ckpt


def record_checkpoint(
    step_dir: Path, *, step: int, world_size: int, time: float, job_id: str | None = None, keep: int = 0
) -> list[Path]:
    """Add the complete checkpoint ``step_dir`` to its run's record; rank 0 only.

    Makes the checkpoint folder and its files writable only by this user, then rewrites
    ``index.json`` atomically. With ``keep > 0`` only the newest ``keep`` records stay;
    returns the folders of the records dropped (the caller removes them).
    """
    root = step_dir.parent
    for p in [*step_dir.iterdir(), step_dir, root]:
        with suppress(OSError):  # a folder not ours stays as it is: resume will then ignore it
            info = p.lstat()
            if info.st_uid == os.geteuid() and not stat.S_ISLNK(info.st_mode):
                p.chmod(stat.S_IMODE(info.st_mode) & ~_SHARED_WRITE)
    fd = os.open(step_dir / _METADATA, _FILE_FLAGS)
    try:
        digest = _sha256(fd)
    finally:
        os.close(fd)
    try:
        root_fd = os.open(root, _DIR_FLAGS)
    except OSError:
        previous: dict[str, _Record] = {}
    else:
        try:
            previous = _read_records(root_fd)
        except _Untrusted:
            previous = {}  # a record that is not ours is replaced, never extended
        finally:
            os.close(root_fd)
    records = [r for r in previous.values() if r.name != step_dir.name and (root / r.name).is_dir()]
    records.append(_Record(step_dir.name, int(step), int(world_size), float(time), job_id, digest))
    dropped = records[:-keep] if keep > 0 else []
    kept = records[-keep:] if keep > 0 else records
    write_json(root / CHECKPOINT_INDEX, {"version": 1, "checkpoints": [r.to_json() for r in kept]})
    return [root / r.name for r in dropped]


@dataclass(frozen=True)
class ResumePlan:
    """What a resumed run will do: start after ``checkpoint.step`` with a new world size."""

    experiment: str
    checkpoint: Checkpoint | None
    old_world_size: int | None
    new_world_size: int
    ignored: tuple[IgnoredCheckpoint, ...] = field(default=())

    @property
    def start_step(self) -> int:
        return self.checkpoint.step + 1 if self.checkpoint else 0

    @property
    def reshard(self) -> bool:
        return self.old_world_size is not None and self.old_world_size != self.new_world_size

    def to_json(self) -> dict[str, Any]:
        return {
            "experiment": self.experiment,
            "checkpoint": self.checkpoint.to_json() if self.checkpoint else None,
            "checkpoint_step": self.checkpoint.step if self.checkpoint else None,
            "old_world_size": self.old_world_size,
            "new_world_size": self.new_world_size,
            "start_step": self.start_step,
            "reshard": self.reshard,
            "ignored": [i.to_json() for i in self.ignored],
        }

    def _ignored_text(self) -> str:
        if not self.ignored:
            return ""
        shown = "; ".join(str(i) for i in self.ignored[:5])
        more = f"; and {len(self.ignored) - 5} more" if len(self.ignored) > 5 else ""
        return f"; ignored {len(self.ignored)} untrusted checkpoint(s): {shown}{more}"

    def __str__(self) -> str:  # one line: previews print it as a comment
        if self.checkpoint is None:
            return (
                f"resume {self.experiment}: no checkpoint yet, starts at step 0 with world size {self.new_world_size}"
                + self._ignored_text()
            )
        change = (
            f"{self.old_world_size} -> {self.new_world_size}" if self.reshard else f"{self.new_world_size} (unchanged)"
        )
        return (
            f"resume {self.experiment}: checkpoint step {self.checkpoint.step} ({self.checkpoint.path.name}), "
            f"world size {change}, continues at step {self.start_step}" + self._ignored_text()
        )


def plan_resume(exp_dir: Path | ExperimentPaths, *, new_world_size: int) -> ResumePlan:
    """The resume plan for an experiment folder and the world size of the next run."""
    exp = exp_dir if isinstance(exp_dir, ExperimentPaths) else ExperimentPaths(Path(exp_dir))
    scan = scan_checkpoints(exp)
    ckpt = scan.trusted[-1] if scan.trusted else None
    return ResumePlan(exp.name, ckpt, ckpt.world_size if ckpt else None, new_world_size, scan.ignored)
