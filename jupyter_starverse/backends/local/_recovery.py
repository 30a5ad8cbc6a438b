"""What a reader of a local run folder needs before it acts on a job whose supervisor is gone.

Whose folder it is (:func:`uid_of`, :func:`owned_by_me`: the folder, ``spec.json`` and
``plan.json`` of this uid, no link), that only one reader acts on a dead supervisor's attempt
(:func:`claim`, an ``O_EXCL`` file), the nodes' billing intervals closed at the last heartbeat
(:func:`closed_nodes`), the final ``cost.json`` (:func:`final_cost`), and whether a live pid is
still the run's supervisor (:func:`runs_folder`). Deciding that it is gone, and the take-over
itself, stay in ``_local`` (whose timing constants and launch the tests patch).
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import replace
from pathlib import Path

from jupyter_starverse._settings import Settings
from jupyter_starverse.experiments import NodeRecord, RunPaths, RunStatus, read_json
from jupyter_starverse.jobmodel import JobSpec

__all__ = ["claim", "closed_nodes", "final_cost", "owned_by_me", "runs_folder", "uid_of"]


def uid_of(path: Path) -> int | str:
    """The owner of ``path`` (not followed if a link), ``"?"`` if it cannot be seen."""
    try:
        return os.lstat(path).st_uid
    except OSError:
        return "?"


def owned_by_me(run: RunPaths) -> bool:
    """The run folder and the records that say what it runs are this uid's own (``lstat``, no link)."""
    me = os.geteuid()
    try:
        if run.owner != me:
            return False
        for record in (run.spec, run.plan):
            st = os.lstat(record)
            if st.st_uid != me or not stat.S_ISREG(st.st_mode):
                return False
    except FileNotFoundError:
        return run.spec.is_file() and not run.spec.is_symlink()  # no plan.json yet (an older version)
    except OSError:
        return False
    return True


def closed_nodes(status: RunStatus, end: float, state: str) -> tuple[NodeRecord, ...]:
    """The nodes with every open billing interval ended at ``end`` (the last heartbeat)."""
    nodes = []
    for n in status.nodes:
        launches = tuple((a, b if b is not None else max(a, end)) for a, b in n.launches)
        done = n.state in ("succeeded", "failed", "cancelled")
        nodes.append(replace(n, launches=launches, state=n.state if done else state, finished=n.finished or end))
    return tuple(nodes)


def claim(run: RunPaths, attempt: int, what: str) -> bool:
    """Only one reader acts on a dead supervisor's attempt (``O_EXCL`` file)."""
    try:
        fd = os.open(run.root / f".{what}-{attempt}.claim", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def final_cost(run: RunPaths, status: RunStatus, settings: Settings | None) -> None:
    """Rewrite ``cost.json`` from the closed intervals (a dead supervisor wrote its last reading)."""
    if settings is None:
        return
    try:
        from jupyter_starverse.costs import job_cost, load_price_table, write_cost
        from jupyter_starverse.experiments import node_intervals

        spec = JobSpec.from_json(read_json(run.spec))
        end = status.finished or time.time()
        cost = job_cost(spec, node_intervals(status), load_price_table(settings), now=end, job_id=run.job_id,
                        user=settings.user)  # fmt: skip
        write_cost(run.root, cost)
    except Exception:  # the meter must not break reading a job
        return


def runs_folder(pid: int, run: RunPaths) -> bool:
    """The supervisor carries the run folder on its command line (guards against reused pids)."""
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not cmdline.parent.is_dir():
        return True  # no /proc (macOS): trust the recorded pid
    try:
        return str(run.root) in cmdline.read_bytes().decode(errors="replace")
    except OSError:
        return False
