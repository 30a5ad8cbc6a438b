"""One detached process per local job: ``python -m jupyter_starverse.backends.local._supervisor RUN_DIR``.

It hosts the c10d rendezvous store, starts one ``torchrun`` agent per node in its own session
(torchrun itself never restarts: ``--max-restarts=0``), records every state change in
``status.json``, and owns every relaunch: an *attempt* is one launch of all nodes (its own
rendezvous round). When an attempt ends early, the first event in time is its root cause
(see ``_attempts``): a preemption (a SIGTERM nobody asked for) or a lost process or node is
relaunched under the preemption budget (``--preempt-restarts``, default 3), a failure under
``JobSpec.max_restarts``; the job goes ``preempted -> resuming -> running`` and the ranks resume
from the newest checkpoint. A node that loses only its agent has its ranks SIGTERMed, so they
checkpoint before the whole group is relaunched. It enforces the budget cap (graceful stop
with a margin of the real grace period, SIGKILL at the cap), honours ``cancel.json`` and
``preempt.json`` (the drill), and on the way out leaves no process of the job behind. Agents
get SIGTERM when it dies (``PR_SET_PDEATHSIG``). It outlives the kernel or shell that
submitted the job.

What it runs comes from the process that started it, never from the folder: the job's spec and
launch plan arrive as JSON on its stdin (``submit``, or a take-over that rebuilt the plan from the
owner's validated spec); ``plan.json`` is a record for people. Requests in the folder
(``cancel.json``, ``preempt.json``, ``pids/``) count only when the run's owner (or root, or the
admin group) wrote them: in a group-shared folder other members can create files too.

Every ``--heartbeat`` seconds it stamps ``heartbeat`` into ``status.json``: a reader on another
host (a second pod sharing the experiments folder) cannot see its pid and judges it by that
alone; a job is cancelled from there through ``cancel.json``, which this loop polls.
The work is split by responsibility: ``_supstate`` (state, bookkeeping, timing constants),
``_supspawn`` (starting an attempt's processes, cold or warm), ``_suplimits`` (budget cap, cost
meter, idle guard), ``_supwatch`` (the attempt loop, requests and signals, stopping) and
``_suprecover`` (root cause, lost work, relaunch, take-over); this module joins them and runs
the job from start to finish.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path

from jupyter_starverse._procs import job_processes, process_record, stop_pids
from jupyter_starverse.errors import StarverseError
from jupyter_starverse.experiments import NodeRecord, RunPaths
from jupyter_starverse.jobmodel import JobSpec

from .._torchrun import LaunchPlan
from ._attempts import PREEMPT_RESTARTS
from ._readonly import after_job
from ._suprecover import Recovery
from ._supspawn import Spawning
from ._supstate import GRACE_S, HEARTBEAT_S
from ._supwatch import Watching

__all__ = ["main"]


class _Supervisor(Spawning, Watching, Recovery):
    """One local job's supervisor: the parts above, and the job's run from start to finish."""

    def run_job(self) -> None:
        now = time.time()
        common = {
            "supervisor_pid": os.getpid(),
            "supervisor": process_record(os.getpid()),
            "heartbeat": now,
            "heartbeat_every": self.heartbeat_every,
        }
        if self.resume and self.status.nodes:
            self.save(**common)
        else:
            self.save(
                state="running", started=now, port=self.plan.port,
                nodes=tuple(NodeRecord(n.index) for n in self.plan.nodes), **common,
            )  # fmt: skip
        try:
            self.listen()
            self.save(port=self.port)
            if self.resume:
                self.hold_mounts()  # the dead supervisor's holds went with it
                self.take_over()
            while True:
                self.launch_attempt()
                if self.run_attempt() != "ended" or not self.recover():
                    break
        except Exception as e:
            self.request_stop(f"supervisor error: {type(e).__name__}: {e}", "failed")
        finally:
            if self.stop_reason is not None:
                self.stop_all()
            stop_pids(job_processes(self.plan.job_id, pid_dir=self.run.pids), grace=2.0)
            self.finish()

    def finish(self) -> None:
        now = time.time()
        nodes = []
        for n in self.status.nodes:
            launches = (*n.launches[:-1], (n.launches[-1][0], n.launches[-1][1] or now)) if n.launches else ()
            state = n.state if n.state in ("succeeded", "failed") else self.stop_state if self.stop_reason else "failed"
            proc = self.procs.get(n.index)
            code = n.exit_code if n.exit_code is not None else (proc.returncode if proc else None)
            nodes.append(replace(n, state=state, exit_code=code, finished=n.finished or now, launches=launches))
        self.status = replace(self.status, nodes=tuple(nodes))
        self.check_budget(final=True)  # costs: the final meter reading of every job, budget or not
        state = self.stop_state if self.stop_reason else "succeeded"
        written = after_job(self.settings, self.spec.mounts)  # a write into a mount shows in the job's reason
        self.save(state=state, finished=now, reason="; ".join(r for r in (self.stop_reason, written) if r) or None)
        for log in self.logs.values():
            log.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jupyter_starverse.backends.local._supervisor")
    parser.add_argument("run_dir")
    parser.add_argument("--listen-fd", type=int, default=None)
    parser.add_argument("--heartbeat", type=float, default=HEARTBEAT_S, help="seconds between heartbeats")
    parser.add_argument("--grace", type=float, default=GRACE_S, help="seconds from SIGTERM to SIGKILL")
    parser.add_argument("--preempt-restarts", type=int, default=PREEMPT_RESTARTS, help="relaunches after preemptions")
    parser.add_argument("--resume", action="store_true", help="take over a job whose supervisor died")
    args = parser.parse_args(argv)
    run = RunPaths(Path(args.run_dir))
    try:
        # what to run comes from our parent on stdin (never from the shared folder)
        given = json.loads(sys.stdin.buffer.read() or b"null")
        spec, plan = JobSpec.from_json(given["spec"]), LaunchPlan.from_json(given["plan"])
        if run.owner != os.geteuid() or plan.job_id != run.job_id:
            raise StarverseError(f"{run.root} is not a run folder of this uid for job {plan.job_id}")
    except (ValueError, KeyError, TypeError, OSError, StarverseError) as e:
        print(f"supervisor: refusing to start: {e}", file=sys.stderr, flush=True)
        return 2
    sup = _Supervisor(
        run, args.listen_fd, args.heartbeat, spec=spec, plan=plan,
        grace=args.grace, preempt_restarts=args.preempt_restarts, resume=args.resume,
    )  # fmt: skip

    def _term(signum: int, _frame: object) -> None:
        sup.request_stop(f"supervisor received signal {signum}", "cancelled")

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _term)
    sup.run_job()
    # the listening socket stays open: the store's daemon thread polls it until the process exits
    return 0 if sup.status.state == "succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
