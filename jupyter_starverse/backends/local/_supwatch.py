"""Watching one attempt of the job, the requests and signals it gets, and stopping it.

:class:`Watching` owns the attempt loop's poll: once per poll the heartbeat, ``cancel.json``,
the preemption drill (``preempt.json``: SIGTERM one node's workers, SIGKILL after the grace)
and the limits; the workers' pids (``pids/``), a vanished rank, an agent's exit, the SIGTERM
to the survivors when a process ends badly (after a settle time, or at once when a node lost
its agent) and the SIGKILL after the grace; and a stop on our own request (SIGTERM, the grace
to checkpoint, SIGKILL), with the budget cap still held while a stopping job takes its time.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from typing import Any

from jupyter_starverse._procs import job_processes, pid_alive, signal_pids, stop_pids
from jupyter_starverse.experiments import read_record

from . import _pool
from ._attempts import signal_name
from ._suplimits import Limits
from ._supstate import POLL_S, SETTLE_S

__all__ = ["Watching"]


class Watching(Limits):
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
