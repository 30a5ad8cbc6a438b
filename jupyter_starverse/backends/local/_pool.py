"""A warm worker pool: one forkserver per user and job interpreter, torch and the runtime imported.

``python -m jupyter_starverse.backends.local._poolproc NAME`` (:mod:`._poolproc`) imports torch, ``torch.distributed``
and the runtime once, then listens on an abstract Unix socket (``NAME``, per uid, home and
interpreter fingerprint). A local job's supervisor asks it for one *node* per request: the pool
forks a node agent (the role torchrun's agent plays in a cold start), which forks the node's
ranks; each rank runs the job's script through ``_worker.main`` exactly as under torchrun. No
rank pays the interpreter start and the torch import, and there is no agent rendezvous: the
supervisor already knows every rank (all nodes are on this machine), so node 0's agent hosts
the job's store on the port ``submit`` bound and the ranks join it as torchrun's do
(``TORCHELASTIC_USE_AGENT_STORE``).

What a forked process may share with the pool, and what it gets fresh:

* The pool never runs a tensor operation, so neither OpenMP's nor torch's intra-op thread pool
  exists when it forks (``torch.set_num_threads`` runs in the rank, from its own
  ``OMP_NUM_THREADS``); CUDA is never initialised in the pool. The node agent forks its ranks
  before it starts the store's thread.
* Fresh in every node agent: its session, signal dispositions (default; SIGPIPE ignored as
  Python does), blocked signals, umask, working folder, the environment (replaced whole, and
  the job's id and node written into the process's visible ``/proc/PID/environ``, so every
  tool that finds a job's processes finds these), stdio (the node log, passed over the socket),
  and the read-only store mounts (a mount namespace of its own: a forked child is single
  threaded). Fresh in every rank: ``RANK`` and the rest of torchrun's variables, ``sys.argv``,
  ``sys.path[0]``, numpy's and Python's random state, its exit code (``os._exit`` after
  ``threading`` shutdown and ``atexit``, as an interpreter's end).
* What the pool imported is what a cold rank would import, so a pool serves only requests whose
  interpreter and every import-shaping variable (``PYTHON*``, ``LD_*``, ``OMP_*`` but the thread
  count, ``MKL_*``, ``TORCH*``, ``STARVERSE_ENV``, ...) match its own (:func:`fingerprint`), and
  it exits when a file of the package or torch it imported changed since it started.

Ownership: a pool is its user's process; it serves only connections from its own uid
(``SO_PEERCRED``), and the supervisor sends a job only to a pool of its own uid. It exits after
``STARVERSE_POOL_IDLE_MINUTES`` without a job, when its home's ``pool/`` folder or its record goes,
or on SIGTERM (``LocalBackend.stop_pools``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "CONNECT_TIMEOUT_S",
    "LOCAL_ADDR",
    "PROTOCOL",
    "SHOWN",
    "peer_uid",
    "pool_dir",
    "recv_msg",
    "send_msg",
    "POOL_MODULE",
    "PoolInfo",
    "PoolUnavailable",
    "WarmAgent",
    "fingerprint",
    "list_pools",
    "pool_env",
    "ready",
    "socket_name",
    "start_node",
    "start_pool",
    "stop_pools",
]

POOL_MODULE = "jupyter_starverse.backends.local._poolproc"
PROTOCOL = 1
CONNECT_TIMEOUT_S = 5.0  # a pool that answers no request within this is busy: the job starts cold
LOCAL_ADDR = "127.0.0.1"
_SHAPING_PREFIXES = ("PYTHON", "LD_", "OMP_", "MKL_", "KMP_", "GOMP_", "TORCH", "PYTORCH_", "CUDA_MODULE_LOADING")
_SHAPING = ("VIRTUAL_ENV", "CONDA_PREFIX", "STARVERSE_ENV", "MALLOC_ARENA_MAX")
_NOT_SHAPING = ("OMP_NUM_THREADS",)  # applied in each rank with torch.set_num_threads
_BASIC = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "TMPDIR", "SHELL", "STARVERSE_HOME")
_ENV_PAD = "STARVERSE_POOL_ENVIRON"  # room in the pool's own environ block for a job's id and node
SHOWN = ("STARVERSE_JOB_ID", "STARVERSE_NODE_INDEX", "STARVERSE_EXPERIMENT_DIR")


class PoolUnavailable(Exception):
    """No warm start for this request (``absent``: no pool runs for this fingerprint)."""

    def __init__(self, why: str, *, absent: bool = False) -> None:
        super().__init__(why)
        self.absent = absent


def _shapes(key: str) -> bool:
    return key not in _NOT_SHAPING and (key.startswith(_SHAPING_PREFIXES) or key in _SHAPING)


def fingerprint(python: str, env: Mapping[str, str]) -> str:
    """What decides what a fresh interpreter imports: its path and every import-shaping variable."""
    data = {
        "protocol": PROTOCOL,
        "python": os.path.realpath(python),
        "uid": os.geteuid(),
        "env": {k: env[k] for k in sorted(env) if _shapes(k)},
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:20]


def pool_dir(home: Path) -> Path:
    return Path(home) / "pool"


def socket_name(home: Path, fp: str) -> str:
    """The pool's abstract socket name: per uid, home and fingerprint (no path-length limit, no stale file)."""
    where = hashlib.sha256(str(Path(home).absolute()).encode()).hexdigest()[:10]
    return f"\0starverse-pool-{os.geteuid()}-{where}-{fp}"


def pool_env(env: Mapping[str, str], home: Path) -> dict[str, str]:
    """The pool's own environment: the job's import-shaping variables, a few basics, no job id."""
    out = {k: v for k, v in env.items() if _shapes(k) or k in _BASIC or k.startswith("LC_")}
    out["STARVERSE_HOME"] = str(home)
    out[_ENV_PAD] = "-" * 512
    return out


# -- wire: a 4-byte length, then JSON; file descriptors ride on the first message ----------------
def send_msg(sock: socket.socket, data: Mapping[str, Any], fds: Sequence[int] = ()) -> None:
    body = json.dumps(data).encode()
    msg = struct.pack("!I", len(body)) + body
    if fds:
        sent = socket.send_fds(sock, [msg], list(fds))
        msg = msg[sent:]
    if msg:
        sock.sendall(msg)


def recv_msg(sock: socket.socket, *, maxfds: int = 0) -> tuple[dict[str, Any] | None, list[int]]:
    fds: list[int] = []
    if maxfds:
        buf, fds, _flags, _addr = socket.recv_fds(sock, 1 << 16, maxfds)
    else:
        buf = sock.recv(1 << 16)
    if not buf:
        return None, fds
    while len(buf) < 4 or len(buf) < 4 + struct.unpack("!I", buf[:4])[0]:
        more = sock.recv(1 << 16)
        if not more:
            return None, fds
        buf += more
    size = struct.unpack("!I", buf[:4])[0]
    data = json.loads(buf[4 : 4 + size])
    return (data if isinstance(data, dict) else None), fds


def peer_uid(sock: socket.socket) -> int:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


def _connect(name: str, timeout: float) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(name)
    except (ConnectionRefusedError, FileNotFoundError) as e:
        sock.close()
        raise PoolUnavailable("no warm pool runs for this job's interpreter and environment", absent=True) from e
    except OSError as e:
        sock.close()
        raise PoolUnavailable(f"the warm pool did not answer ({e})") from e
    if peer_uid(sock) != os.geteuid():  # never hand a job to another user's process
        sock.close()
        raise PoolUnavailable("the pool socket belongs to another user")
    return sock


# -- the supervisor's side --------------------------------------------------------------------------
class WarmAgent:
    """A node agent forked by the pool: ``pid``, ``poll``, ``wait`` and ``returncode`` as a ``Popen``'s.

    Its exit status comes from the pool (its parent) over the request's connection.
    """

    def __init__(self, sock: socket.socket, pid: int) -> None:
        self._sock = sock
        self.pid = pid
        self.returncode: int | None = None
        self._buf = b""
        self._eof = False

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        if not self._eof:
            try:
                while True:
                    chunk = self._sock.recv(4096, socket.MSG_DONTWAIT)
                    if not chunk:
                        self._eof = True
                        break
                    self._buf += chunk
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                self._eof = True
        while len(self._buf) >= 4 and len(self._buf) >= 4 + struct.unpack("!I", self._buf[:4])[0]:
            size = struct.unpack("!I", self._buf[:4])[0]
            msg = json.loads(self._buf[4 : 4 + size])
            self._buf = self._buf[4 + size :]
            if isinstance(msg, dict) and isinstance(msg.get("exit"), int):
                self._done(int(msg["exit"]))
                return self.returncode
        if self._eof:
            from jupyter_starverse._procs import pid_alive

            if not pid_alive(self.pid):  # the pool died before it could tell: count it as lost
                self._done(-int(signal.SIGKILL))
        return self.returncode

    def _done(self, code: int) -> None:
        self.returncode = code
        with contextlib.suppress(OSError):
            self._sock.close()

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("warm node agent", timeout or 0.0)
            time.sleep(0.02)
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGKILL)


def start_node(name: str, request: Mapping[str, Any], fds: Sequence[int]) -> WarmAgent:
    """Ask the pool ``name`` for one node; ``fds``: its log, and for node 0 the store's listening socket."""
    sock = _connect(name, CONNECT_TIMEOUT_S)
    try:
        send_msg(sock, {"protocol": PROTOCOL, **request}, fds)
        reply, _ = recv_msg(sock)
    except OSError as e:
        sock.close()
        raise PoolUnavailable(f"the warm pool did not answer ({e})") from e
    if not reply or not isinstance(reply.get("pid"), int):
        sock.close()
        why = reply.get("error") if reply else None
        raise PoolUnavailable(str(why or "the warm pool closed the connection"))
    sock.settimeout(None)
    return WarmAgent(sock, int(reply["pid"]))


def ready(name: str) -> bool:
    """The pool ``name`` is up and answers (it binds its socket only once its imports are done)."""
    try:
        sock = _connect(name, CONNECT_TIMEOUT_S)
    except PoolUnavailable:
        return False
    with sock:
        try:
            send_msg(sock, {"protocol": PROTOCOL, "ping": True})
            reply, _ = recv_msg(sock)
        except OSError:
            return False
    return bool(reply and reply.get("ok"))


def start_pool(python: str, env: Mapping[str, str], home: Path, *, idle_minutes: float) -> int | None:
    """Start the pool for a job of ``python`` and ``env`` (detached; one per fingerprint wins the lock)."""
    folder = pool_dir(home)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    fp = fingerprint(python, env)
    penv = pool_env(env, home)
    log = os.open(folder / f"{fp}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        proc = subprocess.Popen(
            [python, "-m", POOL_MODULE, fp, "--idle-minutes", f"{idle_minutes:g}"],
            env=penv,
            cwd=folder,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError:
        return None
    finally:
        os.close(log)
    import threading

    threading.Thread(target=proc.wait, name=f"starverse-pool-reap-{proc.pid}", daemon=True).start()
    return proc.pid


@dataclass(frozen=True)
class PoolInfo:
    """One warm pool of this user: its fingerprint, pid, interpreter, start and whether it answers."""

    fingerprint: str
    pid: int
    python: str
    started: float
    ready: bool

    def to_json(self) -> dict[str, Any]:
        return {"fingerprint": self.fingerprint, "pid": self.pid, "python": self.python,
                "started": self.started, "ready": self.ready}  # fmt: skip


def list_pools(home: Path) -> list[PoolInfo]:
    """The pools of this uid and home that run now."""
    from jupyter_starverse._procs import pid_alive

    out = []
    folder = pool_dir(home)
    for f in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        try:
            data = json.loads(f.read_text())
            info = PoolInfo(str(data["fingerprint"]), int(data["pid"]), str(data["python"]), float(data["started"]),
                            False)  # fmt: skip
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if f.stat().st_uid == os.geteuid() and pid_alive(info.pid):
            out.append(PoolInfo(info.fingerprint, info.pid, info.python, info.started,
                                ready(socket_name(home, info.fingerprint))))  # fmt: skip
    return out


def stop_pools(home: Path) -> list[PoolInfo]:
    """SIGTERM every pool of this uid and home (jobs they started run on); returns those stopped."""
    pools = list_pools(home)
    for p in pools:
        with contextlib.suppress(OSError):
            os.kill(p.pid, signal.SIGTERM)
    return pools
