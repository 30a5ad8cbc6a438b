"""The warm pool's own process and the node agents and ranks it forks.

``python -m jupyter_starverse.backends.local._poolproc NAME`` is a warm pool (see ``_pool``
for what it is, who starts it and what it shares): it imports torch and the runtime once,
serves its uid's requests on the abstract socket ``NAME``, retires when a file it imported
changes or after its idle time, and forks one node agent per request. Everything that runs
inside the pool or in a forked child lives here: the preload, the serve loop, the fresh state
each agent and rank gets (signals, environment, ``/proc`` environ, umask), the rank's run of
the job's script and its exit. The supervisor's side (fingerprints, requests, listing and
stopping pools) stays in ``_pool`` and imports nothing of this module.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import selectors
import signal
import socket
import sys
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from ._pool import (
    LOCAL_ADDR,
    POOL_MODULE,
    PROTOCOL,
    SHOWN,
    PoolUnavailable,
    fingerprint,
    peer_uid,
    pool_dir,
    recv_msg,
    send_msg,
    socket_name,
)

__all__ = ["main"]


# -- the pool process ---------------------------------------------------------------------------------
def _code_stamp() -> dict[str, int]:
    """mtime of every imported file of this package and torch's version file: a change retires the pool."""
    root = str(Path(__file__).resolve().parents[2])  # the jupyter_starverse package
    torch_version = str(Path("torch") / "version.py")
    out: dict[str, int] = {}
    for mod in list(sys.modules.values()):
        path = getattr(mod, "__file__", None)
        if isinstance(path, str) and (path.startswith(root) or path.endswith(torch_version)):
            with contextlib.suppress(OSError):
                out[path] = Path(path).stat().st_mtime_ns
    return out


def _stamp_changed(stamp: Mapping[str, int]) -> str | None:
    for path, mtime in stamp.items():
        try:
            if Path(path).stat().st_mtime_ns != mtime:
                return path
        except OSError:
            return path
    return None


# what a rank of the runtime imports before its first step and first checkpoint (never a tensor op here)
_PRELOAD = (
    "torch",
    "torch.distributed",
    "torch.nn.parallel",
    "torch.distributed.fsdp",
    "torch._dynamo",  # DDP and fully_shard import it (with sympy) at their first use: seconds a rank
    "torch.distributed.checkpoint.state_dict",
    "torch.distributed.checkpoint.state_dict_saver",
    "torch.distributed.checkpoint.state_dict_loader",
    "jupyter_starverse.runtime",
    "jupyter_starverse.backends._worker",
)


def _preload() -> None:
    import importlib
    import importlib.util

    for name in _PRELOAD:
        importlib.import_module(name)
    if importlib.util.find_spec("tensorboard") is not None:  # the runtime's first log_metrics opens a writer
        importlib.import_module("torch.utils.tensorboard")


class _Pool:
    def __init__(self, fp: str, idle_s: float) -> None:
        self.fp = fp
        self.idle_s = idle_s
        self.home = Path(os.environ.get("STARVERSE_HOME") or "~/.starverse").expanduser()
        self.folder = pool_dir(self.home)
        self.record = self.folder / f"{fp}.json"
        self.children: dict[int, socket.socket] = {}
        self.conns: set[socket.socket] = set()
        self.last_active = time.monotonic()
        self.stopping = False
        self.sel = selectors.DefaultSelector()
        self.wake_r, self.wake_w = os.pipe()

    def serve(self) -> int:
        import fcntl

        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock = os.open(self.folder / f"{self.fp}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return 0  # another pool of this fingerprint starts or runs
        if fingerprint(sys.executable, os.environ) != self.fp:
            print(f"pool: refusing to start: this environment is not {self.fp}", flush=True)
            return 2
        # what a rank imports anyway; no tensor op, no CUDA, no thread pool (see the module)
        _preload()
        self.stamp = _code_stamp()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(socket_name(self.home, self.fp))
        except OSError as e:
            print(f"pool: cannot bind its socket: {e}", flush=True)
            return 0
        listener.listen(64)
        self.listener = listener
        tmp = self.record.with_name(f".{self.record.name}.tmp")
        tmp.write_text(json.dumps({"fingerprint": self.fp, "pid": os.getpid(), "python": sys.executable,
                                   "started": time.time()}))  # fmt: skip
        tmp.replace(self.record)
        record_ino = self.record.stat().st_ino
        print(f"pool {self.fp}: ready, pid {os.getpid()}", flush=True)
        os.set_blocking(self.wake_w, False)
        os.set_blocking(self.wake_r, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGHUP, self._on_term)
        self.sel.register(listener, selectors.EVENT_READ, "accept")
        self.sel.register(self.wake_r, selectors.EVENT_READ, "wake")
        next_check = 0.0
        while not self.stopping:
            for key, _ in self.sel.select(timeout=1.0):
                if key.data == "accept":
                    self._accept()
                elif key.data == "wake":
                    with contextlib.suppress(OSError):
                        os.read(self.wake_r, 4096)
                else:
                    self._readable(key.fileobj)  # type: ignore[arg-type]
            self._reap()
            now = time.monotonic()
            if now >= next_check:
                next_check = now + 1.0
                try:
                    gone = self.record.stat().st_ino != record_ino
                except OSError:
                    gone = True
                idle = not self.children and now - self.last_active > self.idle_s
                if gone or idle:
                    break
        with contextlib.suppress(OSError):
            if self.record.stat().st_ino == record_ino:
                self.record.unlink()
        listener.close()
        print(f"pool {self.fp}: exits", flush=True)
        return 0

    def _on_term(self, *_: object) -> None:
        self.stopping = True

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        if peer_uid(conn) != os.geteuid():  # only our own user's supervisors
            conn.close()
            return
        conn.settimeout(5.0)
        try:
            request, fds = recv_msg(conn, maxfds=4)
        except (OSError, ValueError):
            conn.close()
            return
        try:
            self._handle(conn, request or {}, fds)
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _handle(self, conn: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
        self.last_active = time.monotonic()
        try:
            if request.get("protocol") != PROTOCOL:
                raise PoolUnavailable(f"protocol {request.get('protocol')!r} is not {PROTOCOL}")
            if request.get("ping"):
                send_msg(conn, {"ok": self.fp, "pid": os.getpid()})
                conn.close()
                return
            env = request.get("env")
            python = request.get("python")
            if not isinstance(env, dict) or not isinstance(python, str) or fingerprint(python, env) != self.fp:
                raise PoolUnavailable("the job's interpreter or environment is not this pool's")
            changed = _stamp_changed(self.stamp)
            if changed:
                self.stopping = True
                raise PoolUnavailable(f"{changed} changed since the pool started; it exits")
            if not fds:
                raise PoolUnavailable("no log file was passed")
        except (PoolUnavailable, OSError) as e:
            with contextlib.suppress(OSError):
                send_msg(conn, {"error": str(e)})
            conn.close()
            return
        conn.settimeout(None)
        pid = os.fork()
        if pid == 0:
            _node_agent(self, conn, request, fds)
        self.children[pid] = conn
        try:
            send_msg(conn, {"pid": pid})
        except OSError:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        self.sel.register(conn, selectors.EVENT_READ, "conn")

    def _readable(self, conn: socket.socket) -> None:
        """The supervisor sends nothing after its request: a readable connection is its end (it died)."""
        try:
            data = conn.recv(4096)
        except OSError:
            data = b""
        if data:
            return
        self.sel.unregister(conn)
        for pid, c in self.children.items():
            if c is conn:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGTERM)  # as PR_SET_PDEATHSIG does for a cold agent

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            self.last_active = time.monotonic()
            if conn is None:
                continue
            with contextlib.suppress(OSError):
                send_msg(conn, {"exit": os.waitstatus_to_exitcode(status)})
            with contextlib.suppress(KeyError, ValueError):
                self.sel.unregister(conn)
            conn.close()

    def close_in_child(self, keep: socket.socket) -> None:
        signal.set_wakeup_fd(-1)
        for obj in (*self.children.values(), self.listener):
            if obj is not keep:
                with contextlib.suppress(OSError):
                    obj.close()
        with contextlib.suppress(OSError):
            self.sel.close()
        for fd in (self.wake_r, self.wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)


# -- in the forked node agent and its ranks ------------------------------------------------------------
def _fresh_signals() -> None:
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD, signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as the interpreter sets it at start
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def _set_environ(env: Mapping[str, str]) -> None:
    """Replace the environment, and show the job's id and node in ``/proc/self/environ``.

    The kernel shows the block the process started with: after ``os.environ`` is replaced no
    C pointer reaches it, so it is overwritten in place (the pool keeps room for it).
    """
    os.environ.clear()
    os.environ.update(env)
    stat = Path("/proc/self/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    start, end = int(fields[47]), int(fields[48])  # env_start, env_end (fields 50 and 51)
    shown = b"".join(f"{k}={env[k]}".encode() + b"\0" for k in SHOWN if k in env)
    if len(shown) > end - start:
        raise OSError("no room to show the job's id in /proc/self/environ")
    block = shown + b"\0" * (end - start - len(shown))
    ctypes.memmove(start, block, len(block))


def _node_agent(pool: _Pool, conn: socket.socket, request: dict[str, Any], fds: list[int]) -> NoReturn:
    code = 1
    try:
        pool.close_in_child(conn)
        os.setsid()
        _fresh_signals()
        os.umask(int(request.get("umask", 0o077)))
        log_fd = fds[0]
        listen_fd = fds[1] if len(fds) > 1 else None
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - lives as long as the process
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        _set_environ({str(k): str(v) for k, v in request["env"].items()})
        os.chdir(str(request["cwd"]))
        paths = [str(p) for p in request.get("readonly") or ()]
        if paths:
            from ._readonly import protect

            try:
                protect(paths)
            except OSError as e:
                why = f"starverse: store mounts are not read-only in this job ({e}); writes are reported\n"
                os.write(2, why.encode())
        code = _run_node(conn, request, listen_fd)
    except BaseException:
        with contextlib.suppress(Exception):
            traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _run_node(conn: socket.socket, request: dict[str, Any], listen_fd: int | None) -> int:
    """The agent's part: fork the ranks, host the store (node 0), pass SIGTERM on, fail the node as one."""
    node, nnodes, nproc = int(request["node"]), int(request["nnodes"]), int(request["nproc"])
    grace = float(os.environ.get("STARVERSE_STOP_GRACE") or 30.0)
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _f: stop.append(signum))
    signal.signal(signal.SIGHUP, lambda signum, _f: stop.append(signum))
    ranks: dict[int, int] = {}
    for local in range(nproc):
        pid = os.fork()
        if pid == 0:
            _rank(request, node * nproc + local, local, nnodes * nproc, listen_fd, conn)
        ranks[pid] = node * nproc + local
    codes: dict[int, int] = {}
    store: Any = None
    termed: float | None = None
    try:
        if listen_fd is not None:
            from datetime import timedelta

            from torch._C._distributed_c10d import TCPStore

            store = TCPStore(LOCAL_ADDR, int(request["port"]), is_master=True, wait_for_workers=False,
                             timeout=timedelta(seconds=600), master_listen_fd=listen_fd, use_libuv=False)  # fmt: skip
        while len(codes) < len(ranks):
            while True:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    pid = 0
                if pid == 0:
                    break
                if pid in ranks:
                    codes[pid] = os.waitstatus_to_exitcode(status)
            if len(codes) >= len(ranks):
                break
            live = [p for p in ranks if p not in codes]
            failed = any(c != 0 for c in codes.values())
            if termed is None and (stop or failed):
                for p in live:
                    with contextlib.suppress(OSError):
                        os.kill(p, signal.SIGTERM)
                termed = time.monotonic()
            elif termed is not None and time.monotonic() - termed > grace:
                for p in live:
                    with contextlib.suppress(OSError):
                        os.kill(p, signal.SIGKILL)
            readable, _, _ = _select([conn], 0.1)
            if readable:
                try:
                    gone = not conn.recv(4096)
                except OSError:
                    gone = True
                if gone and not stop:
                    stop.append(int(signal.SIGTERM))  # the supervisor died: as its SIGTERM
    except BaseException:
        for p in ranks:
            if p not in codes:
                with contextlib.suppress(OSError):
                    os.kill(p, signal.SIGKILL)
        raise
    del store
    ok = not stop and all(c == 0 for c in codes.values())
    if not ok:
        bad = {ranks[p]: c for p, c in codes.items() if c != 0}
        print(f"starverse warm agent (node {node}): ranks ended {bad or 'after a stop request'}", flush=True)
    return 0 if ok else 1


def _select(conns: list[socket.socket], timeout: float) -> tuple[list[Any], list[Any], list[Any]]:
    import select

    try:
        return select.select(conns, [], [], timeout)
    except (OSError, ValueError):
        time.sleep(timeout)
        return [], [], []


def _rank(
    request: dict[str, Any], rank: int, local: int, world: int, listen_fd: int | None, conn: socket.socket
) -> NoReturn:
    code = 1
    try:
        os.setsid()
        _fresh_signals()
        conn.close()
        if listen_fd is not None:
            os.close(listen_fd)
        nproc = int(request["nproc"])
        os.environ.update(
            {
                "RANK": str(rank),
                "LOCAL_RANK": str(local),
                "GROUP_RANK": str(request["node"]),
                "ROLE_RANK": str(rank),
                "ROLE_NAME": "default",
                "LOCAL_WORLD_SIZE": str(nproc),
                "WORLD_SIZE": str(world),
                "GROUP_WORLD_SIZE": str(request["nnodes"]),
                "ROLE_WORLD_SIZE": str(world),
                "MASTER_ADDR": LOCAL_ADDR,
                "MASTER_PORT": str(request["port"]),
                "TORCHELASTIC_RESTART_COUNT": "0",
                "TORCHELASTIC_MAX_RESTARTS": "0",
                "TORCHELASTIC_RUN_ID": str(request.get("run_id") or ""),
                "TORCHELASTIC_USE_AGENT_STORE": "True",
                "TORCH_NCCL_ASYNC_ERROR_HANDLING": os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
            }
        )
        if "OMP_NUM_THREADS" not in os.environ and nproc > 1:
            os.environ["OMP_NUM_THREADS"] = "1"  # as torchrun sets it
        import torch

        with contextlib.suppress(ValueError, RuntimeError):
            torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1)))
        np = sys.modules.get("numpy")
        if np is not None:
            np.random.seed()  # not the pool's state: fresh, as a new interpreter's
        sys.path[0] = str(Path.cwd())  # as `python -m` sets it
        from jupyter_starverse.backends import _worker

        code = _worker.main([str(a) for a in request["entry"]])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        with contextlib.suppress(Exception):
            traceback.print_exc()
        code = 1
    finally:
        import atexit
        import threading

        with contextlib.suppress(BaseException):
            threading._shutdown()  # type: ignore[attr-defined]  # non-daemon threads, as at an interpreter's end
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog=f"python -m {POOL_MODULE}")
    parser.add_argument("fingerprint")
    parser.add_argument("--idle-minutes", type=float, default=20.0)
    args = parser.parse_args(argv)
    return _Pool(args.fingerprint, max(1.0, args.idle_minutes * 60)).serve()


if __name__ == "__main__":
    sys.exit(main())
