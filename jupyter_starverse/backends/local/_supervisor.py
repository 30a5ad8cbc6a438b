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
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any, BinaryIO

from jupyter_starverse._procs import job_processes, pid_alive, process_record, signal_pids, stop_pids
from jupyter_starverse._settings import Settings
from jupyter_starverse._volume import group_id, open_under
from jupyter_starverse.errors import StarverseError
from jupyter_starverse.experiments import (
    NodeRecord,
    RunEvent,
    RunPaths,
    RunStatus,
    folder_modes,
    node_intervals,
    read_record,
    read_status,
    write_status,
)
from jupyter_starverse.jobmodel import JobSpec
from jupyter_starverse.runtime._guards import IdleTracker, gpu_utilisation

from .._torchrun import LOCAL_ADDR, WORKER_MODULE, LaunchPlan, NodePlan
from . import _pool
from ._attempts import (
    PREEMPT_EXIT,
    PREEMPT_RESTARTS,
    Event,
    archive_attempt,
    banner,
    classify,
    lost_work,
    oom_kills,
    signal_name,
)
from ._readonly import LIBC, after_job, readonly_paths, readonly_preexec

__all__ = ["main"]

POLL_S = 0.2
HEARTBEAT_S = 5.0  # default; the backend passes its own with --heartbeat
BUDGET_EVERY_S = 0.5
GRACE_S = 30.0  # default time from SIGTERM to SIGKILL (the backend passes its own with --grace)
SETTLE_S = 3.0  # after a process of an attempt ends badly, how long the others get to end on their own
IDLE_POLL_S = 10.0  # seconds between two utilisation readings of a job's GPUs
HARD_LOOKAHEAD_S = 2.0  # a hard stop shows in the meter within: poll + SIGKILL + the started second
_STRIP_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")


class _Supervisor:
    def __init__(
        self,
        run: RunPaths,
        listen_fd: int | None,
        heartbeat: float = HEARTBEAT_S,
        *,
        spec: JobSpec,
        plan: LaunchPlan,
        grace: float = GRACE_S,
        preempt_restarts: int = PREEMPT_RESTARTS,
        resume: bool = False,
    ) -> None:
        self.run = run
        self.spec = spec
        self.plan = plan
        self.listen_fd = listen_fd
        self.settings = Settings.from_env()
        self.owner = run.owner
        self.admin_gid = group_id(self.settings.admin_group)
        status = read_status(run)
        self.status = status if status is not None else RunStatus(job_id=self.plan.job_id, created=time.time())
        self.procs: dict[int, subprocess.Popen[bytes] | _pool.WarmAgent] = {}
        self.logs: dict[int, BinaryIO] = {}
        self.stop_reason: str | None = None
        self.stop_state = "cancelled"
        self.store: Any = None
        self._own_socket: socket.socket | None = None
        self.pool_wanted: tuple[str, dict[str, str]] | None = None  # start a warm pool once this job runs
        self.port = self.plan.port
        self._next_budget = 0.0
        self.heartbeat_every = max(0.05, heartbeat)
        self._next_beat = 0.0
        self.grace = max(0.5, grace)
        self.preempt_restarts = max(0, preempt_restarts)
        self.resume = resume
        self.hard = False
        self._budget_stop = False
        self._stop_sent = 0.0
        self.idle = self._idle_tracker()
        self._next_idle = 0.0
        self._idle_warned = False
        self._new_attempt()

    def _idle_tracker(self) -> IdleTracker | None:
        """The idle guard of a GPU job (or of any job whose utilisation source is injected)."""
        minutes = self.settings.job_idle_minutes
        if not minutes or not (self.spec.is_gpu or os.environ.get("STARVERSE_GPU_UTIL_FILE")):
            return None
        return IdleTracker(minutes=minutes, warn_minutes=min(5.0, minutes / 2))

    def _new_attempt(self) -> None:
        self.attempt_started = time.time()
        self.agent_exit: dict[int, int] = {}
        self.agent_seen: dict[int, float] = {}
        self.workers: dict[int, tuple[int, int]] = {}  # rank -> (pid, node) of this attempt
        self.worker_seen: dict[int, float] = {}
        self.vanished: dict[int, tuple[int, float]] = {}
        self.log_offsets: dict[int, int] = {}
        self.oom_before: int | None = None
        self.drill = False
        self.drill_deadline: tuple[float, list[int]] | None = None

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

    def node_argv(self, node: NodePlan) -> list[str]:
        """The node's torchrun command for this attempt: its own rendezvous round, no torchrun restarts."""
        attempt = self.status.attempt
        done: set[str] = set()
        out = []
        for arg in node.argv:
            key = arg.split("=", 1)[0]
            if key not in done and key in ("--rdzv-id", "--rdzv-endpoint", "--max-restarts"):
                done.add(key)
                if key == "--rdzv-id":
                    arg = f"--rdzv-id={self.plan.job_id}" + (f"-a{attempt}" if attempt else "")
                elif key == "--rdzv-endpoint" and self.port:
                    arg = f"--rdzv-endpoint={LOCAL_ADDR}:{self.port}"
                elif key == "--max-restarts":
                    arg = "--max-restarts=0"  # the supervisor relaunches the whole job (see _attempts)
            out.append(arg)
        return out

    def node_log(self, node: NodePlan) -> BinaryIO:
        log = self.logs.get(node.index)
        if log is None:
            log = self.logs[node.index] = open_log(self.run, self.run.node_log(node.index))
        return log

    def node_env(self, node: NodePlan) -> dict[str, str]:
        return {
            **self.base_env(),
            **node.env,
            "STARVERSE_ATTEMPT": str(self.status.attempt),
            "STARVERSE_PREEMPT_EXIT": str(PREEMPT_EXIT),
            "STARVERSE_STOP_GRACE": f"{self.grace:g}",
        }

    def start_node(self, node: NodePlan) -> None:
        log = self.node_log(node)
        proc = subprocess.Popen(
            self.node_argv(node),
            env=self.node_env(node),
            cwd=self.run.root,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # a dead supervisor SIGTERMs its agents (ranks checkpoint, billing ends); the store mounts are
            # checked (changed: refused) and read-only in the agent's own mount namespace (see _readonly)
            preexec_fn=readonly_preexec(self.settings, self.spec.mounts, then=_die_with_parent),
        )
        self.started_node(node.index, proc)

    def started_node(self, index: int, proc: subprocess.Popen[bytes] | _pool.WarmAgent) -> None:
        self.procs[index] = proc
        node = self.plan.nodes[index]
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

    def warm_entry(self) -> tuple[str, list[str]] | None:
        """The interpreter and ``_worker`` arguments of the job's ranks, or None (a command of its own)."""
        argv = list(self.plan.nodes[0].argv) if self.plan.nodes else []
        if self.spec.command or "--no-python" in argv or WORKER_MODULE not in argv:
            return None
        at = argv.index(WORKER_MODULE)
        return (argv[0], argv[at + 1 :]) if at > 0 and argv[at - 1] == "-m" else None

    def start_warm(self) -> bool:
        """Start every node of this attempt from the warm pool; False (nothing started): start cold.

        All or nothing: a warm node's ranks join node 0's store, a cold node's the supervisor's.
        """
        entry = self.warm_entry() if self.settings.warm_pool != "off" else None
        if entry is None:
            return False
        python, args = entry
        envs = {n.index: self.node_env(n) for n in self.plan.nodes}
        if len({_pool.fingerprint(python, e) for e in envs.values()}) != 1:
            return False
        fp = _pool.fingerprint(python, envs[0])
        name = _pool.socket_name(self.settings.home, fp)
        readonly = readonly_paths(self.settings, self.spec.mounts)  # a changed mount fails as a cold start does
        self.listen()
        assert self.listen_fd is not None
        started: dict[int, _pool.WarmAgent] = {}
        try:
            for node in self.plan.nodes:
                request = {
                    "python": python,
                    "env": envs[node.index],
                    "cwd": str(self.run.root),
                    "umask": _umask(),
                    "node": node.index,
                    "nnodes": len(self.plan.nodes),
                    "nproc": self.spec.procs_per_node,
                    "port": self.port,
                    "run_id": self.plan.job_id + (f"-a{self.status.attempt}" if self.status.attempt else ""),
                    "entry": args,
                    "readonly": readonly,
                }
                log = self.node_log(node)
                fds = [log.fileno()] + ([self.listen_fd] if node.index == 0 else [])
                started[node.index] = _pool.start_node(name, request, fds)
        except _pool.PoolUnavailable as e:
            for agent in started.values():
                agent.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    agent.wait(timeout=10)
            print(f"attempt {self.status.attempt}: cold start ({e})", file=sys.stderr, flush=True)
            if e.absent and self.settings.warm_pool == "auto":
                self.pool_wanted = (python, envs[0])
            return False
        print(f"attempt {self.status.attempt}: warm start from pool {fp} "
              f"(node agents {[a.pid for a in started.values()]})", file=sys.stderr, flush=True)  # fmt: skip
        for index, agent in started.items():
            self.started_node(index, agent)
        return True

    def listen(self) -> None:
        """The rendezvous port: the socket ``submit`` bound (no port race), or a new one (a take-over)."""
        if self.listen_fd is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((LOCAL_ADDR, 0))
            sock.listen(128)
            self._own_socket = sock
            self.listen_fd = sock.fileno()
            self.port = sock.getsockname()[1]

    def host_store(self) -> None:
        """Serve the rendezvous store of cold agents (once, on :meth:`listen`'s socket)."""
        if self.store is not None:
            return
        from datetime import timedelta

        from torch._C._distributed_c10d import TCPStore

        self.listen()
        self.store = TCPStore(
            LOCAL_ADDR,
            int(self.port or 0),
            is_master=True,
            wait_for_workers=False,
            timeout=timedelta(seconds=600),
            master_listen_fd=self.listen_fd,
            use_libuv=False,
        )

    # -- requests -----------------------------------------------------------------
    def request_stop(self, reason: str, state: str = "cancelled") -> None:
        if self.stop_reason is None:
            self.stop_reason, self.stop_state = reason, state

    def tick(self) -> None:
        """Heartbeat, cancel.json, the preemption drill and the budget: once per poll."""
        self.beat()
        cancel = self.request_file(self.run.cancel)
        if isinstance(cancel, dict):
            self.request_stop(str(cancel.get("reason") or "cancelled")[:500], "cancelled")
        drill = self.request_file(self.run.preempt)
        if isinstance(drill, dict) and self.stop_reason is None:
            with contextlib.suppress(OSError):
                self.run.preempt.unlink()
            self.preempt_drill(drill)
        if self.drill_deadline is not None and time.time() >= self.drill_deadline[0]:
            signal_pids([p for p in self.drill_deadline[1] if pid_alive(p)], signal.SIGKILL)
            self.drill_deadline = None
        self.check_budget()
        self.check_idle()

    def request_file(self, path: Path) -> Any:
        """A cancel or drill request, when its writer may ask it (the owner, root, the admin group)."""
        if not path.exists() and not path.is_symlink():
            return None
        return read_record(path, owner=self.owner, admin_gid=self.admin_gid)

    def check_idle(self) -> None:
        """GPUs idle for ``job_idle_minutes``: a warning in the job's reason, then a graceful stop."""
        if self.idle is None or self.stop_reason is not None or time.monotonic() < self._next_idle:
            return
        self._next_idle = time.monotonic() + min(IDLE_POLL_S, self.idle.minutes * 60 / 8)
        now = time.time()
        verdict = self.idle.observe(now, gpu_utilisation(os.environ.get("CUDA_VISIBLE_DEVICES")))
        idle = self.idle.idle_minutes(now)
        if verdict == "warn" and not self._idle_warned:
            self._idle_warned = True
            left = self.idle.minutes - idle
            self.save(reason=f"idle guard: GPUs idle for {idle:.1f} min; the job stops in {left:.1f} min "
                      "unless they work again (STARVERSE_JOB_IDLE_MINUTES)")  # fmt: skip
        elif verdict == "ok" and self._idle_warned:
            self._idle_warned = False
            self.save(reason=None)
        elif verdict == "stop":
            self.request_stop(
                f"idle guard: the job's GPUs were idle for {idle:.1f} min "
                f"(STARVERSE_JOB_IDLE_MINUTES={self.idle.minutes:g}); stopped after a checkpoint",
                "failed",
            )

    def preempt_drill(self, request: dict[str, Any]) -> None:
        """``jobs preempt``: SIGTERM the workers of one node as a provider would, SIGKILL after the grace."""
        node = request.get("node")
        node = node if isinstance(node, int) and 0 <= node < len(self.plan.nodes) else len(self.plan.nodes) - 1
        self.read_workers(time.time())
        pids = [pid for pid, n in self.workers.values() if n == node]
        if not pids:
            agent = self.procs.get(node)
            pids = [agent.pid] if agent is not None and agent.poll() is None else []
        self.drill = True
        signal_pids(pids, signal.SIGTERM)
        self.drill_deadline = (time.time() + self.grace, pids)
        print(f"preemption drill: SIGTERM to node {node} ({pids})", file=sys.stderr, flush=True)

    def check_budget(self, *, final: bool = False) -> None:
        """Meter the cost into ``cost.json`` and enforce the cap.

        Graceful stop (SIGTERM: the runtime checkpoints) when the cost ``BUDGET_EVERY_S +
        grace + 1`` s from now reaches the budget, ``grace`` being the real time this supervisor
        gives a stopping job before SIGKILL; hard stop (SIGKILL now) when the cost
        ``HARD_LOOKAHEAD_S`` from now reaches it, whatever the job does with its SIGTERM.
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
                grace=0.0 if final else BUDGET_EVERY_S + self.grace + 1.0,
                hard_lookahead=None if final or self.hard else HARD_LOOKAHEAD_S,
                job_id=self.plan.job_id,
                user=self.settings.user,
            )
            reason = None if final else decision.reason if decision.stop and not self._budget_stop else None
            write_cost(self.run.root, decision.cost, reason=reason)
        except Exception as e:
            print(f"cost meter: {e}", file=sys.stderr, flush=True)
            self._next_budget = time.monotonic() + 60.0  # costs: retry an unreadable price each minute, not each poll
            return
        self.status = replace(self.status, cost=str(decision.cost.amount))
        if final or not decision.stop:
            return
        if decision.hard_stop and decision.budget is not None:
            from jupyter_starverse.costs import hard_budget_reason

            why = (
                f"the job had not exited {time.time() - self._stop_sent:.0f} s after SIGTERM"
                if self._budget_stop
                else f"less than {HARD_LOOKAHEAD_S:.0f} s of budget left"
            )
            self.hard_kill(hard_budget_reason(decision.cost, decision.budget, why=why))
        elif decision.reason and not self._budget_stop:
            self._budget_stop = True
            self._stop_sent = time.time()
            self.request_stop(decision.reason, "cancelled")

    def hard_kill(self, reason: str) -> None:
        """SIGKILL every process of the job now and close the billing intervals at this moment."""
        from jupyter_starverse.costs import write_cost

        self.hard = True
        signal_pids(job_processes(self.plan.job_id, pid_dir=self.run.pids), signal.SIGKILL)
        for p in self.procs.values():
            with contextlib.suppress(Exception):
                p.wait(timeout=5)
        now = time.time()
        for n in self.status.nodes:
            if n.launches and n.launches[-1][1] is None:
                self.set_node(n.index, launches=(*n.launches[:-1], (n.launches[-1][0], now)))
        self.stop_reason, self.stop_state = reason, "cancelled"
        try:
            from jupyter_starverse.costs import job_cost, load_price_table

            cost = job_cost(
                self.spec, node_intervals(self.status), load_price_table(self.settings), now=now,
                job_id=self.plan.job_id, user=self.settings.user,
            )  # fmt: skip
            write_cost(self.run.root, cost, reason=reason)
        except Exception as e:
            print(f"cost meter: {e}", file=sys.stderr, flush=True)

    # -- watching an attempt ----------------------------------------------------------
    def read_workers(self, now: float) -> None:
        """Pids of this attempt's workers (``pids/rankN.json`` written since it started)."""
        if len(self.workers) >= self.spec.world_size:
            return
        for f in self.run.pids.glob("rank*.json") if self.run.pids.is_dir() else ():
            data = read_record(f, owner=self.owner) if f.is_file() else None  # a pid another uid wrote is not ours
            if not isinstance(data, dict) or float(data.get("started") or 0) < self.attempt_started - 1.0:
                continue
            rank = int(data.get("rank", -1))
            if rank not in self.workers and isinstance(data.get("pid"), int):
                self.workers[rank] = (int(data["pid"]), int(data.get("node") or 0))
                self.worker_seen[rank] = now

    def watch_workers(self, now: float) -> None:
        self.read_workers(now)
        for rank, (pid, node) in self.workers.items():
            if rank in self.vanished:
                continue
            if pid_alive(pid):
                self.worker_seen[rank] = now
            else:
                self.vanished[rank] = (node, self.worker_seen.get(rank, self.attempt_started))
        if self.status.state == "resuming" and len(self.workers) >= self.spec.world_size:
            self.save(state="running")
        if self.pool_wanted is not None and len(self.workers) >= self.spec.world_size:
            python, env = self.pool_wanted  # once the job runs: the pool's imports do not slow its start
            self.pool_wanted = None
            pool = _pool.start_pool(python, env, self.settings.home, idle_minutes=self.settings.pool_idle_minutes)
            print(f"started a warm pool for the next job of this environment (pid {pool})", file=sys.stderr, flush=True)

    def live_workers(self) -> list[int]:
        return [pid for rank, (pid, _) in self.workers.items() if rank not in self.vanished and pid_alive(pid)]

    def stop_records(self) -> bool:
        return self.run.stops.is_dir() and any(self.run.stops.glob("rank*.json"))

    def on_exit(self, index: int, code: int, now: float) -> None:
        rec = self.node(index)
        launches = (*rec.launches[:-1], (rec.launches[-1][0], now)) if rec.launches else ()
        state = "succeeded" if code == 0 else "failed"
        reason = (
            None if code == 0 else f"killed by {signal_name(-code)}" if code < 0 else f"agent exited with code {code}"
        )
        self.set_node(index, state=state, exit_code=code, finished=now, reason=reason, launches=launches)

    def term_survivors(self) -> None:
        """SIGTERM the agents still running (they pass it on) and the workers of agents that are gone."""
        alive = [p.pid for i, p in self.procs.items() if i not in self.agent_exit and p.poll() is None]
        orphans = [pid for rank, (pid, node) in self.workers.items() if node in self.agent_exit and pid_alive(pid)]
        signal_pids(alive + orphans, signal.SIGTERM)

    def run_attempt(self) -> str:
        """Watch one launch of every node: ``succeeded``, ``stopped`` (by us) or ``ended`` (early)."""
        trigger: float | None = None
        termed: float | None = None
        while True:
            self.tick()
            now = time.time()
            self.watch_workers(now)
            for index, proc in self.procs.items():
                if index in self.agent_exit:
                    continue
                code = proc.poll()
                if code is None:
                    self.agent_seen[index] = now
                else:
                    self.agent_exit[index] = code
                    self.on_exit(index, code, now)
            if self.stop_reason is not None:
                return "stopped"
            everyone_out = len(self.agent_exit) == len(self.procs) and not self.live_workers()
            if everyone_out:
                clean = all(c == 0 for c in self.agent_exit.values()) and not self.stop_records()
                return "succeeded" if clean else "ended"
            if trigger is None and (any(c != 0 for c in self.agent_exit.values()) or self.stop_records()):
                trigger = now
                if any(c < 0 for c in self.agent_exit.values()):  # a node lost its agent: its ranks still run
                    self.term_survivors()
                    termed = now
            if trigger is not None:
                settle = self.grace if self.stop_records() else SETTLE_S
                if termed is None and now - trigger > settle:
                    self.term_survivors()
                    termed = now
                elif termed is not None and now - termed > self.grace:
                    signal_pids(job_processes(self.plan.job_id, pid_dir=self.run.pids), signal.SIGKILL)
            time.sleep(POLL_S)

    # -- recovering -----------------------------------------------------------------
    def per_second(self) -> tuple[Decimal | None, str | None]:
        try:
            from jupyter_starverse.costs import job_rate_per_second, load_price_table

            table = load_price_table(self.settings)
            return job_rate_per_second(self.spec, table), table.currency
        except Exception:
            return None, None

    def recover(self) -> bool:
        """Name what ended the attempt, record the work lost, and relaunch if the budgets allow."""
        attempt = self.status.attempt
        root, _events = classify(
            self.run,
            attempt=attempt,
            started=self.attempt_started,
            agents={i: (self.agent_exit.get(i), self.agent_seen.get(i, self.attempt_started)) for i in self.procs},
            vanished=self.vanished,
            log_offsets=self.log_offsets,
            oom_before=self.oom_before,
            drill=self.drill,
        )
        failed_nodes = [i for i, c in sorted(self.agent_exit.items()) if c != 0]
        if root is None:
            cause = next((x for x in (self.last_log_line(i) for i in failed_nodes) if x), None)
            root = Event(time.time(), "failed", cause or "the job's processes ended before the last step")
        elif root.kind == "failed" and _CODE_ONLY.fullmatch(root.cause):  # a command rank: no error record
            said = next((x for x in (self.last_log_line(i) for i in failed_nodes) if x), None)
            root = replace(root, cause=f"{root.cause}: {said.split(': ', 1)[1]}" if said else root.cause)
        per_second, currency = self.per_second()
        event = lost_work(
            self.run, attempt=attempt, started=self.attempt_started, when=root.time,
            per_second=per_second, currency=currency,
        )  # fmt: skip
        saved = self.framework_checkpoint(attempt) if event.checkpoint_step is None else None
        if saved is not None:  # a framework's own checkpoint (LLaMA-Factory's checkpoint-N), not in our record
            lost = None if event.last_step is None else max(0, event.last_step - saved[0])
            money = per_second * Decimal(repr(max(0.0, root.time - saved[1]) if lost else 0.0)) if per_second else None
            money_text = format(money.quantize(Decimal("0.0001")), "f") if money is not None else None
            event = replace(event, checkpoint_step=saved[0], steps_lost=lost, money_lost=money_text)
        kind = root.kind
        if kind == "failed":
            used, allowed = self.status.restarts - self.status.preemptions, self.spec.max_restarts
            budget = f"max_restarts={allowed}"
        else:
            used, allowed = self.status.preemptions, self.preempt_restarts
            budget = f"{allowed} preemption restart{'s' if allowed != 1 else ''}"
        again = used < allowed and self.stop_reason is None
        where = f"node {failed_nodes[0]} failed: " if kind == "failed" and failed_nodes else f"{kind}: "
        reason = f"{where}{root.cause}; {replace(event, kind=kind).lost_text()}"
        event = replace(event, kind=kind, cause=root.cause, action="resumed" if again else "final")
        events = (*self.status.events, event)
        if not again:
            self.save(events=events)
            self.request_stop(f"{reason}; no restarts left ({budget})", "failed")
            return False
        now = time.time()
        nodes = tuple(
            replace(n, state="preempted", finished=n.finished or now) if n.state in ("failed", "succeeded") else n
            for n in self.status.nodes
        )
        self.save(state="preempted", reason=reason, events=events, nodes=nodes)
        self.resume_next(attempt, event, reason, f" (restart {used + 1} of {allowed})", preempted=kind != "failed")
        return True

    def resume_next(
        self, attempt: int, event: RunEvent, head: str, tail: str = "", *, preempted: bool, **changes: Any
    ) -> None:
        """Keep ``attempt``'s records apart, mark the logs, and record the job as resuming from its checkpoint."""
        archive_attempt(self.run, attempt)
        resume_at = (event.checkpoint_step + 1) if event.checkpoint_step is not None else 0
        text = f"{head}; resuming from step {resume_at}{tail}"
        banner(self.run, self.spec.world_size, f"--- restart {attempt + 1} (attempt {attempt + 1}): {text} ---")
        self.save(
            state="resuming",
            reason=text,
            attempt=attempt + 1,
            restarts=self.status.restarts + 1,
            preemptions=self.status.preemptions + int(preempted),
            **changes,
        )

    def framework_checkpoint(self, attempt: int) -> tuple[int, float] | None:
        """(step, time) a command job's ranks checkpointed at on SIGTERM (``stops/rankN.json``), the lowest."""
        if self.spec.command is None or not self.run.stops.is_dir():
            return None
        found = []
        for f in self.run.stops.glob("rank*.json"):
            with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
                rec = json.loads(f.read_text())
                if int(rec.get("attempt") or 0) == attempt and rec.get("checkpoint_step") is not None:
                    found.append((int(rec["checkpoint_step"]), float(rec.get("time") or 0.0)))
        return min(found) if found else None

    def last_log_line(self, index: int) -> str | None:
        """The node's words on its failure, when no rank recorded an error: the first exception a rank
        printed in this attempt (a command job's rank has no error record), else the agent's last error."""
        try:
            with self.run.node_log(index).open("rb") as f:
                end = f.seek(0, os.SEEK_END)
                f.seek(max(self.log_offsets.get(index, 0), end - (1 << 16)))
                lines = [x.strip() for x in f.read().decode(errors="replace").splitlines() if x.strip()]
        except OSError:
            return None
        lines = [x for x in lines if any(c.isalnum() for c in x)]
        raised = [x for x in lines if _RAISED.match(x) and "ChildFailedError" not in x]
        errors = [x for x in lines if "Error" in x or "error:" in x]
        last = raised[0] if raised else errors[-1] if errors else lines[-1] if lines else None
        return f"node {index}: {last[:300]}" if last else None

    def hold_mounts(self) -> None:
        """Hold the job's mounted store entries for as long as this supervisor lives (a takeover)."""
        if not self.spec.mounts:
            return
        from jupyter_starverse.catalog import Catalog

        catalog = Catalog(self.settings)
        for name in self.spec.mounts:
            try:
                catalog.hold(name, self.plan.job_id)  # released with this process (a dead pid's hold is void)
            except StarverseError as e:  # removed while nobody held it: the job's read says so
                print(f"could not hold {name}: {e}", file=sys.stderr, flush=True)

    def take_over(self) -> None:
        """Resume a job whose supervisor died: its agents got SIGTERM (their ranks checkpoint)."""
        deadline = time.monotonic() + self.grace
        while job_processes(self.plan.job_id, pid_dir=self.run.pids) and time.monotonic() < deadline:
            self.beat()
            time.sleep(POLL_S)
        stop_pids(job_processes(self.plan.job_id, pid_dir=self.run.pids), grace=2.0)
        attempt = self.status.attempt
        when = self.status.heartbeat or time.time()
        per_second, currency = self.per_second()
        started = max((n.launches[-1][0] for n in self.status.nodes if n.launches), default=when)
        cause = "the job's supervisor died (billing closed at its last heartbeat)"
        event = lost_work(
            self.run, attempt=attempt, started=started, when=when, per_second=per_second, currency=currency
        )
        event = replace(event, kind="lost", cause=cause, action="resumed")
        head = f"lost: {cause}; {event.lost_text()}"
        self.resume_next(attempt, event, head, preempted=True, events=(*self.status.events, event))

    def launch_attempt(self) -> None:
        self._new_attempt()
        for node in self.plan.nodes:
            with contextlib.suppress(OSError):
                self.log_offsets[node.index] = self.run.node_log(node.index).stat().st_size
        self.oom_before = oom_kills()
        if self.start_warm():
            return
        self.host_store()
        for node in self.plan.nodes:
            self.start_node(node)

    # -- the job --------------------------------------------------------------------
    def stop_all(self) -> None:
        """Stop on our own request: SIGTERM, ``grace`` seconds to checkpoint, then SIGKILL."""
        if not self.hard:
            self.term_survivors()
            self._stop_sent = self._stop_sent or time.time()
            deadline = time.monotonic() + self.grace
            while time.monotonic() < deadline and not self.hard:
                if all(p.poll() is not None for p in self.procs.values()) and not self.live_workers():
                    break
                self.beat()
                self.check_budget()  # the cap holds while a stopping job takes its time
                time.sleep(POLL_S)
            else:
                if not self.hard and (any(p.poll() is None for p in self.procs.values()) or self.live_workers()):
                    self.kill_after_grace()
        stop_pids(job_processes(self.plan.job_id, pid_dir=self.run.pids), grace=2.0)
        for p in self.procs.values():
            p.wait()

    def kill_after_grace(self) -> None:
        signal_pids(job_processes(self.plan.job_id, pid_dir=self.run.pids), signal.SIGKILL)
        if self._budget_stop and self.stop_reason:
            from jupyter_starverse.costs import BUDGET_REASON_PREFIX

            if self.stop_reason.startswith(BUDGET_REASON_PREFIX):
                head = self.stop_reason.split("; stopped gracefully", 1)[0]
                self.stop_reason = (
                    f"{head}; hard stop (SIGKILL: the job had not exited {self.grace:.0f} s after SIGTERM)"
                )
        elif self.stop_reason:
            self.stop_reason += f" (SIGKILL after the {self.grace:.0f} s grace period)"

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


#: a cause that names only an exit code (the agent's failure table), and a line that is a raised exception
_CODE_ONLY = re.compile(r"rank \d+ \(node \d+\) exited with code -?\d+")
_RAISED = re.compile(r"(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)(?::|$)")


def _umask() -> int:
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def open_log(run: RunPaths, path: Path) -> BinaryIO:
    """Append to a log of the run without following a link (one planted in ``logs/`` is refused)."""
    fd = open_under(run.root, path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, folder_modes(path.parent).file)
    return os.fdopen(fd, "ab")


def _die_with_parent() -> None:
    """In the forked agent: get SIGTERM when the supervisor dies (Linux ``PR_SET_PDEATHSIG``)."""
    if LIBC is not None:
        LIBC.prctl(1, int(signal.SIGTERM), 0, 0, 0)


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
