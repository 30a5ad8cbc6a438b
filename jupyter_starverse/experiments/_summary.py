"""What a job list shows of one run folder: the summary, read from files that are not trusted.

A :class:`JobSummary` is one row of a job list (id, name, backend, state, topology, times,
restarts, cost, mounted versions). :func:`inspect_run` builds it from the run's
``spec.json``, ``status.json`` and backend record, believing nothing: a link, a file another
uid wrote in the owner's folder, a file that is not JSON or a spec the job model refuses leaves
the folder out with the reason. This module also owns the compact row a summary is cached as
in the job index and the ETag of a page of summaries; ``_index`` decides when to re-read.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._journal import WATCHED
from ._status import RunStatus

__all__ = [
    "FINISHED",
    "INCOMPLETE_S",
    "NOFOLLOW",
    "NO_SPEC",
    "ROW",
    "JobPage",
    "JobSummary",
    "SpecCheck",
    "from_row",
    "inspect_run",
    "last_change",
    "page_etag",
    "read_json",
    "run_signature",
    "skipped_text",
    "summarize_run",
    "to_row",
]

INCOMPLETE_S = 60.0  # a run folder without a spec this young is being created, not broken
NO_SPEC = "no spec.json"
_RECORDS = {"kubernetes.json": "kubernetes", "slurm.json": "slurm"}
FINISHED = ("succeeded", "failed", "cancelled")


@dataclass(frozen=True)
class JobSummary:
    """One row of a job list: what ``jobs ls`` and the panel's job list show without opening the run."""

    id: str
    backend: str
    name: str
    title: str
    experiment: str
    run_dir: str
    state: str
    created: float
    started: float | None = None
    finished: float | None = None
    reason: str | None = None
    nodes: int = 1
    procs_per_node: int = 1
    template: str = ""
    accelerator: str = ""
    steps: int | None = None
    restarts: int = 0
    cost: str | None = None
    #: the exact ``NAME@VERSION`` each mount read (pinned at launch; a bare name in older specs)
    mounts: tuple[str, ...] = ()

    @property
    def is_finished(self) -> bool:
        return self.state in FINISHED

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "backend": self.backend,
            "name": self.name,
            "title": self.title,
            "experiment": self.experiment,
            "experiment_dir": self.run_dir,
            "state": self.state,
            "created": self.created,
            "started": self.started,
            "finished": self.finished,
            "reason": self.reason,
            "nodes": self.nodes,
            "procs_per_node": self.procs_per_node,
            "template": self.template,
            "accelerator": self.accelerator,
            "steps": self.steps,
            "restarts": self.restarts,
            "cost": self.cost,
            "mounts": list(self.mounts),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JobSummary:
        return cls(
            id=str(data["id"]),
            backend=str(data["backend"]),
            name=str(data["name"]),
            title=str(data.get("title") or data["name"]),
            experiment=str(data["experiment"]),
            run_dir=str(data["experiment_dir"]),
            state=str(data["state"]),
            created=float(data.get("created") or 0.0),
            started=_num(data.get("started")),
            finished=_num(data.get("finished")),
            reason=data.get("reason"),
            nodes=int(data.get("nodes") or 1),
            procs_per_node=int(data.get("procs_per_node") or 1),
            template=str(data.get("template") or ""),
            accelerator=str(data.get("accelerator") or ""),
            steps=data.get("steps") if isinstance(data.get("steps"), int) else None,
            restarts=int(data.get("restarts") or 0),
            cost=data.get("cost"),
            mounts=tuple(str(m) for m in data.get("mounts") or ()),
        )


def _mounted(spec: dict[str, Any]) -> tuple[str, ...]:
    """``JobSpec.mounted`` of a spec read as JSON: each mount as the exact version it was pinned to."""
    mounts, versions = spec.get("mounts") or (), spec.get("mount_versions") or {}
    if not isinstance(mounts, list) or not isinstance(versions, dict):
        return ()
    return tuple(str(versions.get(m, m)) for m in mounts if isinstance(m, str))


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class JobPage:
    """One page of a filtered job list, newest first: ``total`` rows matched, ``items`` from ``offset``."""

    items: tuple[JobSummary, ...]
    total: int
    offset: int
    limit: int | None
    etag: str
    notes: tuple[str, ...] = ()
    #: Run folders left out of the list, one ``folder: why`` each (malformed, foreign, half-written).
    warnings: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "items": [s.to_json() for s in self.items],
            "total": self.total,
            "offset": self.offset,
            "limit": self.limit,
            "etag": self.etag,
            "notes": list(self.notes),
            "warnings": list(self.warnings),
        }


def skipped_text(warnings: Sequence[str], *, shown: int = 3) -> str | None:
    """The footer of a list that left folders out: ``2 run folders skipped: a: why; b: why``."""
    if not warnings:
        return None
    head = "; ".join(warnings[:shown]) + (f"; and {len(warnings) - shown} more" if len(warnings) > shown else "")
    return f"{len(warnings)} run folder{'s' if len(warnings) != 1 else ''} skipped: {head}"


NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_MAX_RECORD = 16 << 20  # bytes; a spec with inline code may be large, a bigger "record" is not one


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class _Skip(Exception):
    """A run folder that is not listed, and why."""


def _read_record(path: Path, owner: int) -> tuple[bool, Any]:
    """``(present, data)`` of one file of a run folder; :class:`_Skip` when it cannot be believed."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False, None
    except OSError as e:
        raise _Skip(f"{path.name}: {e.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise _Skip(f"{path.name} is a symbolic link")
    if not stat.S_ISREG(st.st_mode):
        raise _Skip(f"{path.name} is not a file")
    if st.st_uid not in (owner, 0):
        raise _Skip(f"{path.name} was written by uid {st.st_uid}, not by the run's owner (uid {owner})")
    if st.st_size > _MAX_RECORD:
        raise _Skip(f"{path.name} is {st.st_size:,} bytes, too large for a record")
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise _Skip(f"{path.name}: {e.strerror}") from None
    if not raw.strip():
        raise _Skip(f"{path.name} is empty")
    try:
        data = json.loads(raw)
    except ValueError:
        raise _Skip(f"{path.name} is not JSON") from None
    if not isinstance(data, dict):
        raise _Skip(f"{path.name} is not a JSON object")
    return True, data


def run_signature(run: str) -> tuple[tuple[str, int, int], ...]:
    out = []
    base = str(run)
    for name in WATCHED:
        try:
            st = os.lstat(f"{base}/{name}")
        except OSError:
            continue
        out.append((name, st.st_size, st.st_mtime_ns))
    return tuple(out)


def summarize_run(run: Path, experiment: str) -> JobSummary | None:
    """The summary of one run folder from its files; ``None`` when it is not a job (yet)."""
    return inspect_run(run, experiment)[0]


SpecCheck = Callable[[dict[str, Any]], object]


def inspect_run(run: Path, experiment: str, check: SpecCheck | None = None) -> tuple[JobSummary | None, str | None]:
    """The summary of one run folder and, when it is left out (or part of it ignored), why.

    Nothing in the folder is trusted: a link, a file another uid wrote in the owner's folder,
    a file that is not JSON, a spec that ``check`` (the job model's validation) refuses, all
    leave the folder out with a reason. ``(None, None)``: a folder being created right now.
    """
    try:
        st = os.lstat(run)
    except OSError as e:
        return None, f"{e.strerror}"
    if stat.S_ISLNK(st.st_mode):
        return None, "a symbolic link, not a run folder"
    if not stat.S_ISDIR(st.st_mode):
        return None, "not a folder"
    try:
        return _inspect(run, experiment, st.st_uid, check)
    except _Skip as e:
        return None, str(e)


def _inspect(run: Path, experiment: str, owner: int, check: SpecCheck | None) -> tuple[JobSummary | None, str | None]:
    if not os.access(run, os.R_OK | os.X_OK):
        raise _Skip(f"not readable (it belongs to uid {owner})")
    record_name, record = None, {}
    for name in _RECORDS:
        present, data = _read_record(run / name, owner)
        if present:
            record_name, record = name, data
            break
    has_spec, spec = _read_record(run / "spec.json", owner)
    if not has_spec:
        spec = record.get("spec")
        if spec is None and not record_name:
            raise _Skip(NO_SPEC)
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or not spec.get("name"):
        raise _Skip("spec.json has no job name")
    if check is not None:
        try:
            check(spec)
        except Exception as e:  # the job model's refusal, whatever it is: the folder is left out
            raise _Skip(f"spec.json: {getattr(e, 'message', None) or e}") from None
    note = None
    try:
        _, status = _read_record(run / "status.json", owner)
    except _Skip as e:
        if "written by uid" not in str(e):
            raise
        status, note = None, f"{e}; ignored"  # a forged status: the job is listed without it
    status = status if isinstance(status, dict) else {}
    if status:
        try:
            RunStatus.from_json(status)  # what the backend reads next: a status it cannot read is not listed
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
            raise _Skip(f"status.json is not a run status ({type(e).__name__}: {str(e)[:120]})") from None
    final_record = record.get("final")
    final: dict[str, Any] = final_record if isinstance(final_record, dict) else {}
    backend = _RECORDS.get(record_name or "", "local")
    if status:
        state = str(status.get("state") or "pending")
        created = _num(status.get("created")) or _num(record.get("created")) or 0.0
        started, finished, reason = status.get("started"), status.get("finished"), status.get("reason")
    elif final:
        state = str(final.get("state") or "running")
        created = _num(record.get("created")) or 0.0
        started, finished, reason = final.get("started"), final.get("finished"), final.get("reason")
    else:  # a cluster job that has not finished: its backend knows the live state
        state = "running" if record.get("slurm_job_id") or backend == "kubernetes" else "pending"
        created = _num(record.get("created")) or 0.0
        started = finished = reason = None
    if (run / "cancel.json").is_file() and state not in FINISHED and backend == "kubernetes":
        state = "cancelled"
    try:
        restarts = int(status.get("restarts") or final.get("restarts") or 0)
        nodes = int(spec.get("nodes") or 1)
        procs = int(spec.get("procs_per_node") or 1)
        created = float(created)
        if not (nodes >= 1 and procs >= 1 and restarts >= 0):
            raise ValueError("nodes, procs_per_node and restarts must be positive")
    except (TypeError, ValueError, OverflowError) as e:
        raise _Skip(f"not a job record ({e})") from None
    summary = JobSummary(
        id=run.name,
        backend=backend,
        name=str(spec["name"]),
        title=str(spec.get("display_name") or spec["name"]),
        experiment=experiment,
        run_dir=str(run),
        state=state,
        created=created,
        started=_num(started),
        finished=_num(finished),
        reason=reason if isinstance(reason, str) else None,
        nodes=nodes,
        procs_per_node=procs,
        template=str(spec.get("template") or ""),
        accelerator=str(spec.get("accelerator") or ""),
        steps=spec.get("steps") if isinstance(spec.get("steps"), int) else None,
        restarts=restarts,
        cost=status.get("cost") if isinstance(status.get("cost"), str) else None,
        mounts=_mounted(spec),
    )
    try:
        json.dumps(summary.to_json(), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise _Skip(f"not a job record ({e})") from None
    return summary, note


ROW = ("id", "backend", "name", "title", "state", "created", "started", "finished", "reason", "nodes",
        "procs_per_node", "template", "accelerator", "steps", "restarts", "cost", "mounts")  # fmt: skip


_ID, _BACKEND, _STATE, _CREATED, _STARTED, _FINISHED_AT = (ROW.index(k) for k in
    ("id", "backend", "state", "created", "started", "finished"))  # fmt: skip


def last_change(row: list[Any]) -> float:
    return max(row[_CREATED] or 0.0, row[_STARTED] or 0.0, row[_FINISHED_AT] or 0.0)


def to_row(s: JobSummary) -> list[Any]:
    data = s.to_json()
    return [data[k] for k in ROW]


def from_row(root: Path, rel: str, row: list[Any]) -> JobSummary:
    data = dict(zip(ROW, row, strict=True))
    return JobSummary.from_json({**data, "experiment": rel.split("/", 1)[0], "experiment_dir": f"{root}/{rel}"})


def page_etag(items: Iterable[JobSummary], total: int, extra: str = "") -> str:
    """A strong validator of a page's content (changes whenever a row or the total changes)."""
    h = hashlib.sha1(usedforsecurity=False)
    h.update(f"{total}|{extra}".encode())
    for s in items:
        h.update(json.dumps(s.to_json(), sort_keys=True).encode())
    return f'"{h.hexdigest()[:20]}"'
