"""What the supervisor does when an attempt ends early, or when it takes over a dead supervisor's job.

:class:`Recovery` names the attempt's root cause (see ``_attempts``), the failing node's own
words when no rank recorded an error, the work lost since the last checkpoint (ours or a
framework's own), and relaunches under the budget that cause falls under (failures:
``max_restarts``; preemptions and lost processes: the preemption budget), recording the job
as ``preempted -> resuming``; a take-over (``--resume``) holds the job's mounts again, waits
for the dead supervisor's processes to end, bills the lost attempt up to its last heartbeat
and resumes from the newest checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
from dataclasses import replace
from decimal import Decimal
from typing import Any

from jupyter_starverse._procs import job_processes, stop_pids
from jupyter_starverse.errors import StarverseError
from jupyter_starverse.experiments import RunEvent

from ._attempts import Event, archive_attempt, banner, classify, lost_work
from ._suplimits import Limits
from ._supstate import POLL_S

__all__ = ["Recovery"]


class Recovery(Limits):
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


#: a cause that names only an exit code (the agent's failure table), and a line that is a raised exception
_CODE_ONLY = re.compile(r"rank \d+ \(node \d+\) exited with code -?\d+")
_RAISED = re.compile(r"(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)(?::|$)")
