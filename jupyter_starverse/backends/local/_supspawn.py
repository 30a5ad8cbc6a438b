"""How the supervisor starts an attempt's processes: cold ``torchrun`` agents or warm-pool nodes.

:class:`Spawning` owns process spawning: the environment and ``torchrun`` command of each node
for this attempt (its own rendezvous round, no torchrun restarts), the node logs, a cold start
(``Popen`` in a new session, store mounts read-only, SIGTERM when the supervisor dies), a warm
start of every node from the warm pool (all or nothing, else cold), the rendezvous socket and
the c10d store cold agents join, and :meth:`Spawning.launch_attempt` that starts one attempt.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from typing import BinaryIO

from jupyter_starverse._procs import process_record

from .._torchrun import LOCAL_ADDR, WORKER_MODULE, NodePlan
from . import _pool
from ._attempts import PREEMPT_EXIT, oom_kills
from ._readonly import LIBC, readonly_paths, readonly_preexec
from ._supstate import SupervisorState, open_log

__all__ = ["Spawning"]

_STRIP_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")


class Spawning(SupervisorState):
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


def _umask() -> int:
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def _die_with_parent() -> None:
    """In the forked agent: get SIGTERM when the supervisor dies (Linux ``PR_SET_PDEATHSIG``)."""
    if LIBC is not None:
        LIBC.prctl(1, int(signal.SIGTERM), 0, 0, 0)
