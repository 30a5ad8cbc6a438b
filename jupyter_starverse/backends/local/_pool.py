"""A warm worker pool: one forkserver per user and job interpreter, torch and the runtime imported.

``python -m jupyter_starverse.backends.local._pool NAME`` imports torch, ``torch.distributed``
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
import ctypes
import hashlib
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

__all__ = [
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

POOL_MODULE = "jupyter_starverse.backends.local._pool"
PROTOCOL = 1
CONNECT_TIMEOUT_S = 5.0  # a pool that answers no request within this is busy: the job starts cold
_LOCAL_ADDR = "127.0.0.1"
_SHAPING_PREFIXES = ("PYTHON", "LD_", "OMP_", "MKL_", "KMP_", "GOMP_", "TORCH", "PYTORCH_", "CUDA_MODULE_LOADING")
_SHAPING = ("VIRTUAL_ENV", "CONDA_PREFIX", "STARVERSE_ENV", "MALLOC_ARENA_MAX")
_NOT_SHAPING = ("OMP_NUM_THREADS",)  # applied in each rank with torch.set_num_threads
_BASIC = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "TMPDIR", "SHELL", "STARVERSE_HOME")
_ENV_PAD = "STARVERSE_POOL_ENVIRON"  # room in the pool's own environ block for a job's id and node
_SHOWN = ("STARVERSE_JOB_ID", "STARVERSE_NODE_INDEX", "STARVERSE_EXPERIMENT_DIR")


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
def _send(sock: socket.socket, data: Mapping[str, Any], fds: Sequence[int] = ()) -> None:
    body = json.dumps(data).encode()
    msg = struct.pack("!I", len(body)) + body
    if fds:
        sent = socket.send_fds(sock, [msg], list(fds))
        msg = msg[sent:]
    if msg:
        sock.sendall(msg)


def _recv(sock: socket.socket, *, maxfds: int = 0) -> tuple[dict[str, Any] | None, list[int]]:
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


def _peer_uid(sock: socket.socket) -> int:
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
    if _peer_uid(sock) != os.geteuid():  # never hand a job to another user's process
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
        _send(sock, {"protocol": PROTOCOL, **request}, fds)
        reply, _ = _recv(sock)
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
            _send(sock, {"protocol": PROTOCOL, "ping": True})
            reply, _ = _recv(sock)
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
        if _peer_uid(conn) != os.geteuid():  # only our own user's supervisors
            conn.close()
            return
        conn.settimeout(5.0)
        try:
            request, fds = _recv(conn, maxfds=4)
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
                _send(conn, {"ok": self.fp, "pid": os.getpid()})
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
                _send(conn, {"error": str(e)})
            conn.close()
            return
        conn.settimeout(None)
        pid = os.fork()
        if pid == 0:
            _node_agent(self, conn, request, fds)
        self.children[pid] = conn
        try:
            _send(conn, {"pid": pid})
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
                _send(conn, {"exit": os.waitstatus_to_exitcode(status)})
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
    shown = b"".join(f"{k}={env[k]}".encode() + b"\0" for k in _SHOWN if k in env)
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

            store = TCPStore(_LOCAL_ADDR, int(request["port"]), is_master=True, wait_for_workers=False,
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
                "MASTER_ADDR": _LOCAL_ADDR,
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
