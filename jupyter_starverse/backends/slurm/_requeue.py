"""The batch script's restart keeper: whether an attempt that ended is requeued, and why.

Slurm relaunches a job by requeueing it (same Slurm id, ``SLURM_RESTART_COUNT`` + 1); nobody of
ours runs beside the job, so the batch script asks this module, on the job's first node:

- ``begin RUN ATTEMPT PREEMPT_RESTARTS``, before the nodes start: attempts that ended without
  ``end`` (slurmctld requeued the job itself: a lost node, a preemption with
  ``PreemptMode=REQUEUE``) are recorded as ``lost`` and spend the preemption budget; exit 1 when
  it is spent (the script then stops for good).
- ``end RUN ATTEMPT RC STOPPING STARTED MAX_RESTARTS PREEMPT_RESTARTS``, after the nodes ended:
  names the first event (a rank's SIGTERM stop in ``stops/``, the batch shell's SIGTERM, a rank's
  error, the exit code), records it with the work lost since the checkpoint in ``restarts.json``,
  keeps the attempt's ``errors/`` and ``stops/`` apart, and exits 0 when the job is to be requeued
  (``scontrol requeue``), 1 when the end is final (success, usage error, budget spent, cancel).

The budgets are the local backend's: preemptions up to ``PREEMPT_RESTARTS``, failures of the
script up to ``JobSpec.max_restarts`` (``backends._restarts``).
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from jupyter_starverse.backends._restarts import USAGE_EXIT, RestartBudget, archive_attempt, lost_work
from jupyter_starverse.experiments import RunPaths, read_json, write_json

__all__ = ["RESTARTS", "main", "read_restarts"]

RESTARTS = "restarts.json"


def read_restarts(run: RunPaths) -> dict[str, Any]:
    data = read_json(run.root / RESTARTS)
    record = data if isinstance(data, dict) else {}
    record.setdefault("preemptions", 0)
    record.setdefault("failures", 0)
    record.setdefault("events", [])
    return record


def _stop_cause(run: RunPaths) -> str | None:
    """The first rank that stopped on SIGTERM in this attempt (``stops/rankN.json``)."""
    stops = [read_json(f) for f in run.stops.glob("rank*.json")] if run.stops.is_dir() else []
    got = [s for s in stops if isinstance(s, dict) and s.get("signalled")]
    if not got:
        return None
    first = min(got, key=lambda s: float(s["signalled"]))
    return f"rank {first.get('rank')} (node {first.get('node')}) got SIGTERM and checkpointed step {first.get('step')}"


def _classify(run: RunPaths, rc: int, stopping: bool) -> tuple[str, str] | None:
    """(kind, cause) of an attempt that ended, or None for a success."""
    stopped = _stop_cause(run)
    if stopped is not None:
        return "preempted", stopped
    if stopping:
        return "preempted", "the batch script got SIGTERM (time limit or preemption)"
    if rc == 0:
        return None
    if rc == USAGE_EXIT:
        return "usage", f"exit code {rc} (a usage error)"
    from jupyter_starverse.watch import first_rank_error

    first = first_rank_error(run)
    return "failed", f"exit code {rc}" + (f"; first error: {first}" if first else "")


def begin(run: RunPaths, attempt: int, preempt_restarts: int) -> int:
    record = read_restarts(run)
    seen = int(record["preemptions"]) + int(record["failures"])
    while seen < attempt:  # requeued by slurmctld: the batch shell had no say
        event = lost_work(run, attempt=seen, started=float(record.get("started") or 0), when=time.time(),
                          per_second=None, currency=None)  # fmt: skip
        budget_left = int(record["preemptions"]) < preempt_restarts
        cause = "Slurm requeued the job (a lost node or a preemption)"
        record["events"].append(
            replace(event, kind="lost", cause=cause, action="resumed" if budget_left else "final").to_json()
        )
        record["preemptions"] = int(record["preemptions"]) + 1
        archive_attempt(run, seen)
        seen += 1
        if not budget_left:
            record["final_reason"] = f"lost: {cause}; no restarts left (preemption budget {preempt_restarts} used)"
            write_json(run.root / RESTARTS, record)
            print(f"starverse: {record['final_reason']}", flush=True)
            return 1
    record["attempt"], record["started"] = attempt, time.time()
    write_json(run.root / RESTARTS, record)
    return 0


def end(
    run: RunPaths, attempt: int, rc: int, stopping: bool, started: float, max_restarts: int, preempt_restarts: int
) -> int:
    if run.cancel.is_file():
        print("starverse: cancelled: not requeued", flush=True)
        return 1
    found = _classify(run, rc, stopping)
    if found is None:
        return 1
    kind, cause = found
    record = read_restarts(run)
    budget = RestartBudget(preemptions=int(record["preemptions"]), failures=int(record["failures"]))
    again = kind != "usage" and budget.allows(kind, max_restarts=max_restarts, preempt_restarts=preempt_restarts)
    event = lost_work(run, attempt=attempt, started=started, when=time.time(), per_second=None, currency=None)
    event = replace(event, kind=kind, cause=cause, action="resumed" if again else "final")
    record["events"].append(event.to_json())
    head = f"{kind}: {cause}; {event.lost_text()}"
    if again:
        after = budget.after(kind)
        record["preemptions"], record["failures"] = after.preemptions, after.failures
        resume_at = (event.checkpoint_step + 1) if event.checkpoint_step is not None else 0
        record["reason"] = f"{head}; resuming from step {resume_at} (restart {after.restarts})"
        archive_attempt(run, attempt)
    else:
        limit = budget.limit_text(kind, max_restarts=max_restarts, preempt_restarts=preempt_restarts)
        record["final_reason"] = head + ("" if kind == "usage" else f"; no restarts left ({limit})")
    write_json(run.root / RESTARTS, record)
    print(f"starverse: {record.get('reason') if again else record['final_reason']}", flush=True)
    return 0 if again else 1


def main(argv: list[str]) -> int:
    usage = (
        "usage: python -m jupyter_starverse.backends.slurm._requeue begin RUN ATTEMPT PREEMPT_RESTARTS\n"
        "       python -m jupyter_starverse.backends.slurm._requeue end RUN ATTEMPT RC STOPPING STARTED "
        "MAX_RESTARTS PREEMPT_RESTARTS"
    )
    try:
        if argv[:1] == ["begin"] and len(argv) == 4:
            return begin(RunPaths(Path(argv[1])), int(argv[2]), int(argv[3]))
        if argv[:1] == ["end"] and len(argv) == 8:
            run = RunPaths(Path(argv[1]))
            return end(run, int(argv[2]), int(argv[3]), argv[4] == "1", float(argv[5]), int(argv[6]), int(argv[7]))
    except ValueError as e:
        print(f"{usage}\n{e}", file=sys.stderr)
        return 2
    print(usage, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
