"""Starting the detached supervisor of a local run, for a submit and for a take-over alike.

:func:`spawn_supervisor` runs ``python -m ..._supervisor RUN_DIR`` in a session of its own with
the job's secrets in its environment only, hands it the spec and the plan it runs on stdin (never
from the folder), appends its output to ``supervisor.log`` (a planted link is refused), records
its pid and start time in ``supervisor.json`` and reaps it when it ends. The heartbeat, grace and
preemption budget come from the caller (``_local.start_supervisor`` passes its ``HEARTBEAT_S``).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time

from jupyter_starverse._procs import process_record
from jupyter_starverse._settings import Settings
from jupyter_starverse._volume import open_under
from jupyter_starverse.experiments import RunPaths, folder_modes, write_json
from jupyter_starverse.jobmodel import JobSpec

from .._secrets import run_secrets
from .._torchrun import LaunchPlan

__all__ = ["SUPERVISOR_MODULE", "spawn_supervisor"]

SUPERVISOR_MODULE = "jupyter_starverse.backends.local._supervisor"


def spawn_supervisor(
    run: RunPaths,
    settings: Settings,
    sock: socket.socket | None,
    *,
    plan: LaunchPlan,
    spec: JobSpec,
    heartbeat: float,
    grace: float,
    preempt_restarts: int,
    resume: bool = False,
    secrets: bool = False,
) -> int:
    """Start the detached supervisor of ``run`` (``sock``: the bound rendezvous port; ``None``: its own); its pid.

    The job's secrets are resolved here, into the supervisor's environment only (its ranks inherit
    them): ``secrets`` for a submit (a reference that does not resolve fails it), else (take-over)
    only those that resolve, and only for a run folder of this uid.
    """
    env = {**os.environ, **settings.to_env()}
    env.update(run_secrets(run.spec, strict=secrets))
    env.pop("STARVERSE_JOB_ID", None)
    argv = [sys.executable, "-m", SUPERVISOR_MODULE, str(run.root)]
    fds: tuple[int, ...] = ()
    if sock is not None:
        argv += ["--listen-fd", str(sock.fileno())]
        fds = (sock.fileno(),)
    argv += ["--heartbeat", str(heartbeat), "--grace", f"{grace:g}", "--preempt-restarts", str(preempt_restarts)]
    if resume:
        argv.append("--resume")
    # a link planted at supervisor.log is refused, never appended through
    log_fd = open_under(run.root, run.root / "supervisor.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                        folder_modes(run.root).file)  # fmt: skip
    with os.fdopen(log_fd, "ab") as log:
        proc = subprocess.Popen(
            argv,
            env=env,
            cwd=run.root,
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            pass_fds=fds,
            start_new_session=True,
        )
    assert proc.stdin is not None
    with contextlib.suppress(BrokenPipeError), proc.stdin:  # what it runs: from us, never from the folder
        proc.stdin.write(json.dumps({"spec": spec.to_json(), "plan": plan.to_json()}).encode())
    # status.json belongs to the supervisor from now on; its pid goes into a file of its own
    record = process_record(proc.pid).to_json()
    write_json(
        run.root / "supervisor.json",
        {
            "pid": proc.pid,
            "started": time.time(),
            "process": record,
            "grace": grace,
            "preempt_restarts": preempt_restarts,
        },
    )
    _reap_later(proc)
    return proc.pid


def _reap_later(proc: subprocess.Popen[bytes]) -> None:
    """Collect the supervisor's exit status when it ends, so it never lingers as a zombie."""
    import threading

    threading.Thread(target=proc.wait, name=f"starverse-reap-{proc.pid}", daemon=True).start()
