"""Checkpoints of an experiment, whether they can be trusted and are healthy, and the plan to resume.

A checkpoint is a folder ``<run>/checkpoints/step-<8 digits>/`` written with
``torch.distributed.checkpoint`` by every rank, plus ``meta.json`` written by rank 0.
After the folder got its final name, rank 0 records it in the run's own checkpoint record
``<run>/checkpoints/index.json``: step, world size, time, job id, health, the name and size of
every file and the SHA-256 of the DCP ``.metadata`` pickle, and an HMAC-SHA256 over all of it
(and the experiment and run names) keyed by the run's secret.

**Provenance.** Every run has a secret, ``<run>/.secret`` (64 hex digits, created by the
run's first checkpoint, ``O_EXCL``; mode 0600, 0640 in a group-shared run folder). The
experiments folder may be shared, and loading a DCP checkpoint unpickles its ``.metadata``,
so a checkpoint is *trusted* (listed, resumed from) only when

* its run's secret can be read by this process and was written by this user (or, in a
  group-shared run folder, by a member of the folder's group whom the file is shared with),
  is not a symbolic link and nobody else may write it;
* the run's record lists it with an HMAC that this secret reproduces: an entry edited after
  writing, copied from another run or experiment, or written without a secret is refused;
* the checkpoint folder and every file in it belong to the uid that wrote the secret, are
  not symbolic links, are writable by nobody else, are exactly the recorded files with the
  recorded sizes, and the ``.metadata`` has the recorded SHA-256.

Trust does not depend on the umask (the writer sets every mode itself) nor on the reader's
uid alone: under one shared uid (pods, containers as root) a checkpoint of another run or an
edited record is still refused. Anyone who can read a run's secret can sign for that run, so
the secret is as private as the run folder's group allows.

**Health.** A checkpoint written while the loss was not finite (the runtime's NaN guard), or
whose weights or optimizer state are not finite, is recorded *unhealthy* with the problem:
it is never resumed from, and retention (``keep``) keeps the newest ``keep`` healthy ones
(and at most ``keep`` unhealthy ones besides, for a post-mortem), so the newest healthy
checkpoint is never deleted by a diverged run.

Everything refused is reported as an :class:`IgnoredCheckpoint` with the reason, never read
beyond ``stat`` and the metadata digest. Checkpoints are ranked by what the records say (time,
then step), never by anything inside a checkpoint folder. The checks open each folder once
and ``fstat`` what they opened, so a folder renamed while it is checked cannot slip in; a
loader keeps the verified folder open (:func:`open_trusted_checkpoint`) and reads through it.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_starverse._volume import write_atomic
from jupyter_starverse.errors import BadInputError, ConflictError, NotFoundError, PermissionDeniedError

from ._batch import BatchPlan, batch_plan
from ._layout import ExperimentPaths, RunPaths
from ._provenance import (
    CHECKPOINT_INDEX,
    DIR_FLAGS,
    FILE_FLAGS,
    METADATA,
    RUN_SECRET,
    STEP_DIR,
    Record,
    Untrusted,
    file_modes,
    open_root,
    open_step,
    read_records,
    record_binding,
    run_secret,
    sha256_of,
)

__all__ = [
    "CHECKPOINT_INDEX",
    "RUN_SECRET",
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
    "run_secret",
    "scan_checkpoints",
    "verify_checkpoint",
]

_INDEX_VERSION = 2


def checkpoint_name(step: int) -> str:
    """Folder name of the checkpoint taken after ``step``."""
    return f"step-{step:08d}"


@dataclass(frozen=True)
class Checkpoint:
    """A trusted checkpoint: the step it was taken after, the world size that wrote it, its health."""

    step: int
    path: Path
    world_size: int
    time: float
    job_id: str | None = None
    healthy: bool = True
    problem: str | None = None  # why it is unhealthy (a non-finite loss, weights or optimizer state)

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "path": str(self.path),
            "world_size": self.world_size,
            "time": self.time,
            "job_id": self.job_id,
            "healthy": self.healthy,
            "problem": self.problem,
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
    """Trusted healthy checkpoints (oldest first, by their runs' records) and the folders ignored.

    ``ignored`` holds the untrusted folders and the trusted but unhealthy checkpoints (the
    reason starts with ``unhealthy:``); ``unhealthy`` holds the latter as checkpoints too.
    """

    trusted: tuple[Checkpoint, ...] = ()
    ignored: tuple[IgnoredCheckpoint, ...] = ()
    unhealthy: tuple[Checkpoint, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "trusted": [c.to_json() for c in self.trusted],
            "ignored": [i.to_json() for i in self.ignored],
            "unhealthy": [c.to_json() for c in self.unhealthy],
        }


def _step_of(name: str) -> int | None:
    m = STEP_DIR.match(name)
    return int(m.group(1)) if m else None


def _checkpoint(rec: Record, path: Path) -> Checkpoint:
    return Checkpoint(rec.step, path, rec.world_size, rec.time, rec.job_id, rec.healthy, rec.problem)


def _unhealthy_reason(rec: Record) -> str:
    return f"unhealthy: {rec.problem or 'written after the training diverged'}"


_Ranked = tuple[float, int, int, Checkpoint]


def _scan_root(root: Path, good: list[_Ranked], sick: list[_Ranked], ignored: list[IgnoredCheckpoint]) -> None:
    try:
        names = sorted(p.name for p in root.iterdir() if STEP_DIR.match(p.name))
    except OSError:
        return
    if not names:
        return
    try:
        opened = open_root(root)
    except (Untrusted, FileNotFoundError) as err:
        why = str(err) if isinstance(err, Untrusted) else "its run folder is gone"
        ignored.extend(IgnoredCheckpoint(root / n, _step_of(n), why) for n in names)
        return
    try:
        order = {name: i for i, name in enumerate(opened.records)}
        for name in names:
            rec = opened.records.get(name)
            if rec is None:
                why = opened.refused.get(name, f"not in its run's checkpoint record {CHECKPOINT_INDEX}")
                ignored.append(IgnoredCheckpoint(root / name, _step_of(name), why))
                continue
            try:
                os.close(open_step(opened, rec))
            except (Untrusted, FileNotFoundError) as err:
                why = str(err) if isinstance(err, Untrusted) else "it is gone"
                ignored.append(IgnoredCheckpoint(root / name, rec.step, why))
                continue
            ranked = (rec.time, rec.step, order[name], _checkpoint(rec, root / name))
            if rec.healthy:
                good.append(ranked)
            else:
                sick.append(ranked)
                ignored.append(IgnoredCheckpoint(root / name, rec.step, _unhealthy_reason(rec)))
    finally:
        os.close(opened.fd)


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:  # EACCES: another user's run folder we cannot enter holds nothing we could load
        return False


def _roots(path: Path | ExperimentPaths | RunPaths) -> list[Path]:
    base = path.root if isinstance(path, (ExperimentPaths, RunPaths)) else Path(path)
    roots = [base / "checkpoints"]
    if _is_dir(base / "runs"):
        with suppress(OSError):
            roots += [run / "checkpoints" for run in sorted((base / "runs").iterdir())]
    return [r for r in roots if _is_dir(r)]


def scan_checkpoints(path: Path | ExperimentPaths | RunPaths) -> CheckpointScan:
    """Trusted healthy checkpoints of a run folder or of every run of an experiment, and the rest."""
    good: list[_Ranked] = []
    sick: list[_Ranked] = []
    ignored: list[IgnoredCheckpoint] = []
    for root in _roots(path):
        _scan_root(root, good, sick, ignored)
    good.sort(key=lambda t: t[:3])
    sick.sort(key=lambda t: t[:3])
    return CheckpointScan(tuple(t[3] for t in good), tuple(ignored), tuple(t[3] for t in sick))


def list_checkpoints(path: Path | ExperimentPaths | RunPaths) -> list[Checkpoint]:
    """Trusted healthy checkpoints of a run folder, or of every run of an experiment; oldest first."""
    return list(scan_checkpoints(path).trusted)


def latest_checkpoint(path: Path | ExperimentPaths | RunPaths) -> Checkpoint | None:
    """The newest trusted healthy checkpoint of a run folder or of any run of an experiment."""
    found = scan_checkpoints(path).trusted
    return found[-1] if found else None


@contextmanager
def open_trusted_checkpoint(path: Path) -> Iterator[tuple[Checkpoint, Path]]:
    """Check the checkpoint folder ``path`` and keep it open while the block runs.

    Yields the checkpoint and a path to read it through: on Linux ``/proc/self/fd/N`` of
    the verified folder, so renaming folders after the check cannot swap what is read.
    ``PermissionDeniedError`` (naming the folder and why) when it is not trusted,
    ``ConflictError`` when it is unhealthy, ``NotFoundError`` when it is gone. Nothing inside
    it is read but the ``.metadata`` bytes.
    """
    path = Path(path)
    hint = "resume only from checkpoints your own runs wrote (launch without --resume to start afresh)"
    gone = NotFoundError(f"checkpoint {path} is incomplete or gone", hint="launch without resume")
    try:
        opened = open_root(path.parent)
    except FileNotFoundError:
        raise gone from None
    except Untrusted as err:
        raise PermissionDeniedError(f"refusing to load checkpoint {path}: {err}", hint=hint) from None
    try:
        rec = opened.records.get(path.name)
        if rec is None:
            if not (path.parent / path.name).exists():
                raise gone
            why = opened.refused.get(path.name, f"not in its run's checkpoint record {CHECKPOINT_INDEX}")
            raise PermissionDeniedError(f"refusing to load checkpoint {path}: {why}", hint=hint)
        try:
            fd = open_step(opened, rec)
        except FileNotFoundError:
            raise gone from None
        except Untrusted as err:
            raise PermissionDeniedError(f"refusing to load checkpoint {path}: {err}", hint=hint) from None
    finally:
        os.close(opened.fd)
    try:
        if not rec.healthy:
            raise ConflictError(
                f"refusing to resume from checkpoint {path}: {_unhealthy_reason(rec)}",
                hint="resume from an earlier, healthy checkpoint (--resume picks the newest healthy one)",
            )
        through = Path(f"/proc/self/fd/{fd}")
        yield _checkpoint(rec, path), (through if through.is_dir() else path)
    finally:
        os.close(fd)


def verify_checkpoint(path: Path) -> Checkpoint:
    """The checkpoint at ``path`` if it is trusted and healthy, else the error saying why not."""
    with open_trusted_checkpoint(path) as (ckpt, _):
        return ckpt


# ------------------------------------------------------------------------------- writing a record
def _retained(records: list[Record], keep: int) -> tuple[list[Record], list[Record]]:
    """(kept, dropped): the newest ``keep`` healthy records and at most ``keep`` unhealthy ones besides."""
    if keep <= 0:
        return records, []
    healthy = [r for r in records if r.healthy][-keep:]
    sick = [r for r in records if not r.healthy][-keep:]
    keep_names = {r.name for r in healthy} | {r.name for r in sick}
    return [r for r in records if r.name in keep_names], [r for r in records if r.name not in keep_names]


def record_checkpoint(
    step_dir: Path,
    *,
    step: int,
    world_size: int,
    time: float,
    job_id: str | None = None,
    keep: int = 0,
    healthy: bool = True,
    problem: str | None = None,
) -> list[Path]:
    """Add the complete checkpoint ``step_dir`` to its run's record; rank 0 only.

    Gives the checkpoint folder and its files modes only this user may write (whatever the
    umask), records every file's size and the metadata digest, signs the entry with the run's
    secret and rewrites ``index.json`` atomically (mode set explicitly). ``healthy=False``
    (with the ``problem``) marks a checkpoint no resume picks. With ``keep > 0`` the newest
    ``keep`` healthy records stay (and at most ``keep`` unhealthy ones); returns the folders of
    the records dropped (the caller removes them).
    """
    step_dir = Path(step_dir).absolute()
    root = step_dir.parent
    key = run_secret(root.parent)
    folder_mode, file_mode = file_modes(root.parent.stat())
    me = os.geteuid()
    files: list[tuple[str, int]] = []
    for p in sorted(step_dir.iterdir()):
        info = p.lstat()
        if info.st_uid == me and stat.S_ISREG(info.st_mode):
            p.chmod(file_mode)
        files.append((p.name, info.st_size))
    for folder in (step_dir, root):
        with suppress(OSError):  # a folder not ours stays as it is: resume will then ignore it
            info = folder.lstat()
            if info.st_uid == me and stat.S_ISDIR(info.st_mode):
                folder.chmod(folder_mode)
    fd = os.open(step_dir / METADATA, FILE_FLAGS)
    try:
        digest = sha256_of(fd)
    finally:
        os.close(fd)
    binding = record_binding(root)
    try:
        root_fd = os.open(root, DIR_FLAGS)
    except OSError:
        previous: dict[str, Record] = {}
    else:
        try:
            previous = read_records(root_fd, key, binding)[0]  # entries not signed by this run are dropped
        except Untrusted:
            previous = {}
        finally:
            os.close(root_fd)
    records = [r for r in previous.values() if r.name != step_dir.name and (root / r.name).is_dir()]
    records.append(
        Record(
            step_dir.name,
            int(step),
            int(world_size),
            float(time),
            job_id,
            digest,
            tuple(files),
            bool(healthy),
            None if healthy else (problem or "written after the training diverged"),
        )
    )
    kept, dropped = _retained(records, keep)
    data = {"version": _INDEX_VERSION, "checkpoints": [r.signed(key, binding) for r in kept]}
    write_atomic(root / CHECKPOINT_INDEX, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode(), file_mode)
    return [root / r.name for r in dropped]


# ---------------------------------------------------------------------------------- resume plans
@dataclass(frozen=True)
class ResumePlan:
    """What a resumed run will do: start after ``checkpoint.step`` with a new world size."""

    experiment: str
    checkpoint: Checkpoint | None
    old_world_size: int | None
    new_world_size: int
    ignored: tuple[IgnoredCheckpoint, ...] = field(default=())
    old_batch: BatchPlan | None = None  # the plan the checkpoint recorded (templates record theirs)
    new_batch: BatchPlan | None = None  # the same global batch over the new data-parallel ranks
    batch_problem: str | None = None  # why the global batch cannot be kept

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
            "old_batch": self.old_batch.to_json() if self.old_batch else None,
            "new_batch": self.new_batch.to_json() if self.new_batch else None,
            "keeps_global_batch": (self.new_batch is not None) if self.old_batch else None,
            "batch": self._batch_text() or None,
            "batch_problem": self.batch_problem,
        }

    def _batch_text(self) -> str:
        if self.old_batch is None:
            return ""
        if self.new_batch is None:
            return f"global batch {self.old_batch.global_batch} cannot be kept: {self.batch_problem}"
        return self.new_batch.change_from(self.old_batch)

    def _ignored_text(self) -> str:
        if not self.ignored:
            return ""
        shown = "; ".join(str(i) for i in self.ignored[:5])
        more = f"; and {len(self.ignored) - 5} more" if len(self.ignored) > 5 else ""
        return f"; ignored {len(self.ignored)} untrusted or unhealthy checkpoint(s): {shown}{more}"

    def __str__(self) -> str:  # one line: previews print it as a comment
        if self.checkpoint is None:
            return (
                f"resume {self.experiment}: no healthy checkpoint yet, starts at step 0 with world size "
                f"{self.new_world_size}" + self._ignored_text()
            )
        change = (
            f"{self.old_world_size} -> {self.new_world_size}" if self.reshard else f"{self.new_world_size} (unchanged)"
        )
        return (
            f"resume {self.experiment}: checkpoint step {self.checkpoint.step} ({self.checkpoint.path.name}), "
            f"world size {change}, continues at step {self.start_step}"
            + (f"; {self._batch_text()}" if self.old_batch else "")
            + self._ignored_text()
        )


def plan_resume(
    exp_dir: Path | ExperimentPaths, *, new_world_size: int, data_parallel: int | None = None
) -> ResumePlan:
    """The resume plan for an experiment folder and the world size of the next run (healthy checkpoints only).

    When the checkpoint recorded its batch plan (the templates do), the plan also says how the
    global batch is kept over ``data_parallel`` ranks (default: the world size; tensor and
    pipeline parallel ranks share their samples), or why it cannot be.
    """
    exp = exp_dir if isinstance(exp_dir, ExperimentPaths) else ExperimentPaths(Path(exp_dir))
    scan = scan_checkpoints(exp)
    ckpt = scan.trusted[-1] if scan.trusted else None
    old = new = None
    problem = None
    if ckpt is not None:
        try:
            meta = json.loads((ckpt.path / "meta.json").read_text())
        except (OSError, ValueError):
            meta = None
        old = BatchPlan.from_json(meta.get("batch")) if isinstance(meta, dict) else None
    if old is not None:
        ranks = data_parallel or new_world_size
        try:
            new = batch_plan(
                global_batch=old.global_batch, micro_batch=old.requested_micro_batch, world_size=ranks, uneven=True
            )
        except BadInputError as e:
            problem = f"{e} ({e.hint})" if e.hint else str(e)
    return ResumePlan(
        exp.name, ckpt, ckpt.world_size if ckpt else None, new_world_size, scan.ignored, old, new, problem
    )
