"""One detached process per local job: ``python -m jupyter_starverse.backends.local._supervisor RUN_DIR``.

It hosts the c10d rendezvous store (so any node may die and be relaunched), starts one
``torchrun`` agent per node in its own session, records every state change in
``status.json``, relaunches a node killed by a signal (up to ``max_restarts`` times),
enforces the budget cap, honours ``cancel.json``, and on the way out leaves no process
of the job behind. It outlives the kernel or shell that submitted the job.

Every ``--heartbeat`` seconds it stamps ``heartbeat`` into ``status.json``: a reader on another
host (a second pod sharing the experiments folder) cannot see its pid and judges it by that
alone; a job is cancelled from there through ``cancel.json``, which this loop polls.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, BinaryIO

from jupyter_starverse._procs import job_processes, process_record, signal_pids, stop_pids
from jupyter_starverse._settings import Settings
from jupyter_starverse.experiments import (
    NodeRecord,
    RunPaths,
    RunStatus,
    node_intervals,
    read_json,
    read_status,
    write_status,
)
from jupyter_starverse.jobmodel import JobSpec

from .._torchrun import LOCAL_ADDR, LaunchPlan, NodePlan

__all__ = ["main", "root_cause"]

POLL_S = 0.2
HEARTBEAT_S = 5.0  # default; the backend passes its own with --heartbeat
BUDGET_EVERY_S = 2.0
STOP_GRACE_S = 30.0
BUDGET_GRACE_S = 25.0  # the runtime exits at most 25 s after SIGTERM, checkpoint included
_STRIP_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")


def root_cause(run: RunPaths) -> str | None:
    """The earliest error any rank recorded, as ``rank R (node N): Error: message``."""
    first: dict[str, Any] | None = None
    if run.errors.is_dir():
        for f in run.errors.glob("rank*.json"):
            data = read_json(f)
            if isinstance(data, dict) and (first is None or data.get("time", 0) < first.get("time", 0)):
                first = data
    if first is None:
        return None
    return f"rank {first.get('rank')} (node {first.get('node')}): {first.get('error')}"


class _Supervisor:
    def __init__(self, run: RunPaths, listen_fd: int | None, heartbeat: float = HEARTBEAT_S) -> None:
        self.run = run
        self.spec = JobSpec.from_json(read_json(run.spec))
        self.plan = LaunchPlan.from_json(read_json(run.plan))
        self.listen_fd = listen_fd
        self.settings = Settings.from_env()
        status = read_status(run)
        self.status = status if status is not None else RunStatus(job_id=self.plan.job_id, created=time.time())
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.logs: dict[int, BinaryIO] = {}
        self.relaunches = 0
        self.stop_reason: str | None = None
        self.stop_state = "cancelled"
        self.store: Any = None
        self._next_budget = 0.0
        self.heartbeat_every = max(0.05, heartbeat)
        self._next_beat = 0.0

    # -- bookkeeping --------------------------------------------------------------
    def save(self, **changes: Any) -> None:
        self.status = replace(self.status, **changes)
        write_status(self.run, self.status)

    def beat(self) -> None:
        """Stamp the heartbeat (and so rewrite ``status.json``: a record wrongly marked finished heals)."""
        if time.monotonic() >= self._next_beat:
            self._next_beat = time.monotonic() + self.heartbeat_every
            self.save(heartbeat=time.time())

    def node(self, index: int) -> NodeRecord:
        return self.status.nodes[index]

    def set_node(self, index: int, **changes: Any) -> None:
        self.status = self.status.with_node(replace(self.node(index), **changes))
        write_status(self.run, self.status)

    # -- processes ----------------------------------------------------------------
    def base_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _STRIP_ENV and not k.startswith("TORCHELASTIC_")}
        env.update(self.settings.to_env())
        return env

    def start_node(self, node: NodePlan) -> None:
        log = self.logs.get(node.index)
        if log is None:
            log = self.logs[node.index] = self.run.node_log(node.index).open("ab")
        proc = subprocess.Popen(
            list(node.argv),
            env={**self.base_env(), **node.env},
            cwd=self.run.root,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs[node.index] = proc
        now = time.time()
        rec = self.node(node.index)
        self.set_node(
            node.index,
            state="running",
            pid=proc.pid,
            process=process_record(proc.pid),
            exit_code=None,
            started=rec.started or now,
            finished=None,
            launches=(*rec.launches, (now, None)),
        )

    def host_store(self) -> None:
        """Serve the rendezvous store on the socket ``submit`` bound (no port race)."""
        from datetime import timedelta

        from torch._C._distributed_c10d import TCPStore

        self.store = TCPStore(
            LOCAL_ADDR,
            int(self.plan.port or 0),
            is_master=True,
            wait_for_workers=False,
            timeout=timedelta(seconds=600),
            master_listen_fd=self.listen_fd,
            use_libuv=False,
        )

    # -- the loop -----------------------------------------------------------------
    def request_stop(self, reason: str, state: str = "cancelled") -> None:
        if self.stop_reason is None:
            self.stop_reason, self.stop_state = reason, state

    def on_exit(self, index: int, code: int) -> None:
        now = time.time()
        rec = self.node(index)
        launches = (*rec.launches[:-1], (rec.launches[-1][0], now)) if rec.launches else ()
        if code == 0:
            self.set_node(index, state="succeeded", exit_code=0, finished=now, launches=launches)
            return
        killed = code < 0
        reason = f"killed by signal {-code}" if killed else f"agent exited with code {code}"
        if killed and self.stop_reason is None and self.relaunches < self.plan.max_node_relaunches:
            self.relaunches += 1
            stop_pids(job_processes(self.plan.job_id, node=index, pid_dir=self.run.pids), grace=2.0)
            self.set_node(
                index,
                reason=f"{reason}; relaunched ({self.relaunches}/{self.plan.max_node_relaunches})",
                launches=launches,
            )
            self.start_node(self.plan.nodes[index])
            return
        self.set_node(index, state="failed", exit_code=code, finished=now, reason=reason, launches=launches)
        if self.stop_reason is None:
            cause = root_cause(self.run) or self.last_log_line(index)
            self.request_stop(
                f"node {index} failed ({reason})" + (f"; first error: {cause}" if cause else ""), "failed"
            )

    def last_log_line(self, index: int) -> str | None:
        """The agent's last words, when no rank recorded an error (it failed before any rank ran)."""
        try:
            with self.run.node_log(index).open("rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
                lines = [x.strip() for x in f.read().decode(errors="replace").splitlines() if x.strip()]
        except OSError:
            return None
        lines = [x for x in lines if any(c.isalnum() for c in x)]
        errors = [x for x in lines if "Error" in x or "error:" in x]
        last = errors[-1] if errors else lines[-1] if lines else None
        return f"node {index}: {last[:300]}" if last else None

    def check_budget(self, *, final: bool = False) -> None:
        """Meter the cost into ``cost.json``; at the cap stop gracefully (SIGTERM: the runtime checkpoints).

        The decision looks ``BUDGET_EVERY_S + BUDGET_GRACE_S`` ahead: the time a stop takes
        (SIGTERM, checkpoint, exit) is still billed, so the job is stopped that much earlier.
        """
        if not final and time.monotonic() < self._next_budget:
            return
        self._next_budget = time.monotonic() + BUDGET_EVERY_S
        try:
            from jupyter_starverse.costs import check_budget, load_price_table, write_cost

            decision = check_budget(
                self.spec,
                node_intervals(self.status),
                load_price_table(self.settings),
                now=time.time(),
                grace=0.0 if final else BUDGET_EVERY_S + BUDGET_GRACE_S,
                job_id=self.plan.job_id,
                user=self.settings.user,
            )
            # the final reading keeps the reason recorded when the cap stopped the job
            write_cost(self.run.root, decision.cost, reason=None if final else decision.reason)
        except Exception as e:
            print(f"cost meter: {e}", file=sys.stderr, flush=True)
            self._next_budget = time.monotonic() + 60.0  # costs: retry an unreadable price each minute, not each poll
            return
        self.status = replace(self.status, cost=str(decision.cost.amount))
        if decision.stop and decision.reason and not final:
            self.request_stop(decision.reason, "cancelled")

    def stop_all(self) -> None:
        running = [p.pid for p in self.procs.values() if p.poll() is None]
        signal_pids(running, signal.SIGTERM)  # agents forward SIGTERM to their workers
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline and any(p.poll() is None for p in self.procs.values()):
            self.beat()
            time.sleep(POLL_S)
        stop_pids(job_processes(self.plan.job_id, pid_dir=self.run.pids), grace=2.0)
        for p in self.procs.values():
            p.wait()

    def loop(self) -> None:
        while True:
            self.beat()
            cancel = read_json(self.run.cancel)
            if isinstance(cancel, dict):
                self.request_stop(str(cancel.get("reason") or "cancelled"), "cancelled")
            # costs: meter every job (cost.json feeds `starverse cost total`); only a budget can stop it
            self.check_budget()
            for index, proc in list(self.procs.items()):
                if self.node(index).state == "running" and (code := proc.poll()) is not None:
                    self.on_exit(index, code)
            if self.stop_reason is not None:
                return
            if all(n.state == "succeeded" for n in self.status.nodes):
                return
            time.sleep(POLL_S)

    def run_job(self) -> None:
        self.save(
            state="running",
            started=time.time(),
            supervisor_pid=os.getpid(),
            supervisor=process_record(os.getpid()),
            heartbeat=time.time(),
            heartbeat_every=self.heartbeat_every,
            port=self.plan.port,
            nodes=tuple(NodeRecord(n.index) for n in self.plan.nodes),
        )
        try:
            for node in self.plan.nodes:
                self.start_node(node)
            self.host_store()
            self.loop()
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
        self.save(state=state, finished=now, reason=self.stop_reason)
        for log in self.logs.values():
            log.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jupyter_starverse.backends.local._supervisor")
    parser.add_argument("run_dir")
    parser.add_argument("--listen-fd", type=int, default=None)
    parser.add_argument("--heartbeat", type=float, default=HEARTBEAT_S, help="seconds between heartbeats")
    args = parser.parse_args(argv)
    sup = _Supervisor(RunPaths(Path(args.run_dir)), args.listen_fd, args.heartbeat)

    def _term(signum: int, _frame: object) -> None:
        sup.request_stop(f"supervisor received signal {signum}", "cancelled")

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _term)
    sup.run_job()
    # the listening socket stays open: the store's daemon thread polls it until the process exits
    return 0 if sup.status.state == "succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
