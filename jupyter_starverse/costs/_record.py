"""The cost record in an experiment folder (``cost.json``) and the per-user total.

``cost.json`` holds the latest meter reading of the run (:meth:`Cost.to_json`) plus the
``reason`` the run was stopped by the budget cap, if it was. It is replaced atomically
(temp file + rename), so a reader never sees half a record. The per-user total adds the
``amount`` of every record whose ``user`` matches, per currency (a currency change by the
operator is never mixed into one sum).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from jupyter_starverse._volume import write_atomic
from jupyter_starverse.errors import BadInputError, StoreError
from jupyter_starverse.experiments import folder_modes, trusted_record

from ._html import table_html
from ._meter import Cost

__all__ = ["COST_FILE", "CostRecord", "UserTotal", "read_cost", "user_total", "write_cost"]

COST_FILE = "cost.json"
#: How deep below the experiments root a ``cost.json`` is looked for (experiment/run/...).
_MAX_DEPTH = 3


@dataclass(frozen=True)
class CostRecord:
    """A ``cost.json``: the meter reading, why the run was stopped (if by the cap), where it lies."""

    cost: Cost
    reason: str | None
    path: str

    def to_json(self) -> dict[str, Any]:
        return {**self.cost.to_json(), "reason": self.reason, "path": self.path}


def write_cost(experiment_dir: str | os.PathLike[str], cost: Cost, *, reason: str | None = None) -> CostRecord:
    """Write ``cost.json`` into ``experiment_dir`` atomically; keep an earlier ``reason``."""
    folder = Path(experiment_dir)
    if not folder.is_dir():
        raise StoreError(
            f"experiment folder {folder} does not exist", hint="the run's folder was removed; nothing recorded"
        )
    target = folder / COST_FILE
    if reason is None:
        try:
            reason = read_cost(folder).reason
        except (FileNotFoundError, BadInputError):
            reason = None
    data = {**cost.to_json(), "reason": reason}
    try:
        # the run folder's modes (0600, 0640 in group mode), never the umask's; a link at the
        # name is replaced by the rename, not written through
        write_atomic(target, (json.dumps(data, indent=1) + "\n").encode(), folder_modes(folder).file)
    except OSError as e:
        raise StoreError(
            f"cannot write {target}: {e}", hint="check free space and permissions of the experiments folder"
        ) from e
    return CostRecord(cost, reason, str(target))


def read_cost(experiment_dir: str | os.PathLike[str]) -> CostRecord:
    """Read ``cost.json`` of a run; ``FileNotFoundError`` when the run was never metered.

    A ``cost.json`` another uid than the run folder's owner wrote (a forged bill in a
    group-shared folder) is :class:`BadInputError`: never counted, listed as unreadable.
    """
    target = Path(experiment_dir) / COST_FILE
    if target.is_symlink() or (target.exists() and not trusted_record(target, owner=_owner(target.parent))):
        raise BadInputError(
            f"{target} was not written by the run's owner", field="cost", hint="its owner can delete it; it is ignored"
        )
    text = target.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except ValueError as e:
        raise BadInputError(
            f"{target} is not valid JSON: {e}", field="cost", hint="delete it; the meter rewrites it"
        ) from None
    if not isinstance(data, dict):
        raise BadInputError(f"{target} is not a cost record", field="cost", hint="delete it; the meter rewrites it")
    reason = data.get("reason")
    return CostRecord(Cost.from_json(data), str(reason) if reason is not None else None, str(target))


@dataclass(frozen=True)
class UserTotal:
    """Everything ``user`` has spent over all experiments, per currency."""

    user: str
    amounts: tuple[tuple[str, Decimal], ...]
    records: tuple[CostRecord, ...]
    unreadable: tuple[str, ...] = ()

    @property
    def running(self) -> int:
        """How many of the runs are still being metered."""
        return sum(1 for r in self.records if r.cost.running)

    def to_json(self) -> dict[str, Any]:
        return {
            "user": self.user,
            "amounts": [{"currency": c, "amount": str(a)} for c, a in self.amounts],
            "runs": len(self.records),
            "running": self.running,
            "records": [r.to_json() for r in self.records],
            "unreadable": list(self.unreadable),
        }

    def _repr_html_(self) -> str:
        rows = [
            (
                r.cost.job_id or Path(r.path).parent.name,
                r.cost.figure,
                "running" if r.cost.running else "",
                r.reason or "",
            )
            for r in self.records
        ]
        return table_html(("run", "cost", "", "stopped because"), rows, caption=str(self).splitlines()[0])

    def __str__(self) -> str:
        if not self.records:
            return f"{self.user}: no metered runs yet"
        total = ", ".join(f"{a:,} {c}" for c, a in self.amounts)
        lines = [f"{self.user}: {total} over {len(self.records)} run(s), {self.running} running"]
        for r in self.records:
            why = f"  [{r.reason}]" if r.reason else ""
            lines.append(f"  {r.cost.job_id or Path(r.path).parent.name}: {r.cost.figure}{why}")
        lines.extend(f"  unreadable: {u}" for u in self.unreadable)
        return "\n".join(lines)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(str(self))


def _owner(folder: Path) -> int | None:
    try:
        return os.lstat(folder).st_uid
    except OSError:
        return None


def _cost_folders(root: Path) -> list[str]:
    """Folders holding a ``cost.json``, at most ``_MAX_DEPTH`` below ``root`` (no links followed)."""
    found: list[str] = []
    top = str(root).rstrip(os.sep)
    base = top.count(os.sep)
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
        if COST_FILE in filenames:
            found.append(dirpath)
        if dirpath.count(os.sep) - base >= _MAX_DEPTH:
            dirnames[:] = []
        else:
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
    return found


def user_total(experiments: str | os.PathLike[str], user: str) -> UserTotal:
    """Sum the recorded cost of every run of ``user`` under ``experiments``.

    Records that cannot be read are listed in ``unreadable`` rather than counted as 0.
    """
    root = Path(experiments)
    records: list[CostRecord] = []
    unreadable: list[str] = []
    sums: dict[str, Decimal] = {}
    if root.is_dir():
        for folder in _cost_folders(root):
            try:
                record = read_cost(folder)
            except (OSError, BadInputError) as e:
                unreadable.append(f"{folder}: {e}")
                continue
            if record.cost.user != user:
                continue
            records.append(record)
            sums[record.cost.currency] = sums.get(record.cost.currency, Decimal(0)) + record.cost.amount
    records.sort(key=lambda r: r.cost.as_of, reverse=True)
    return UserTotal(user, tuple(sorted(sums.items())), tuple(records), tuple(unreadable))


def budget_stop_reason(experiment_dir: str | os.PathLike[str] | None) -> str | None:
    """Why a job stopped itself at its budget cap (the ``cost.json`` its runtime wrote), if it did.

    Read by the backends that have no supervisor beside the job (Kubernetes, Slurm).
    """
    from ._cap import BUDGET_REASON_PREFIX

    if not experiment_dir:
        return None
    try:
        reason = read_cost(experiment_dir).reason
    except (OSError, BadInputError):
        return None
    return reason if reason and reason.startswith(BUDGET_REASON_PREFIX) else None
