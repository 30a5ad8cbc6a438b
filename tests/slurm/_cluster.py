"""A real Slurm cluster on this machine: munged, slurmctld and two slurmd (``n1``, ``n2``).

Everything lives in one temp folder (config, munge key and socket, state, spool, logs, pid
files) and uses ports chosen free, so it never touches a system Slurm or munge. Used by
``tests/slurm/conftest.py`` and ``benchmarks/bench_slurm.py``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["APT_HINT", "SlurmCluster", "missing_programs", "start_cluster"]

APT_HINT = "apt-get install -y slurm-wlm munge"
_PROGRAMS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo")


def missing_programs() -> list[str]:
    """Programs of the cluster that are not installed (searched on PATH and in /usr/sbin)."""
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    return [p for p in _PROGRAMS if shutil.which(p, path=path) is None]


def _which(program: str) -> str:
    found = shutil.which(program, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    assert found, program
    return found


def _free_ports(count: int) -> list[int]:
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    host: str
    nodes: tuple[str, ...] = ("n1", "n2")
    pids: list[int] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        """What a client (sbatch, squeue, ...) needs to talk to this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [_which(argv[0]), *argv[1:]],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            check=check,
            timeout=30,
        )

    def node_states(self) -> dict[str, str]:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False).stdout
        return dict(line.split(None, 1) for line in out.splitlines() if line.strip())

    def wait_idle(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            states = self.node_states()
            if len(states) == len(self.nodes) and all(s.rstrip("*") == "idle" for s in states.values()):
                return
            time.sleep(0.3)
        raise RuntimeError(f"Slurm nodes not idle after {timeout} s: {states}; logs in {self.root}")

    def stop(self) -> None:
        """Stop every daemon by its pid (slurmd first), then wait for them to go."""
        for pid in reversed(self.pids):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 15
        for pid in self.pids:
            while time.monotonic() < deadline and _alive(pid):
                time.sleep(0.1)
            if _alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.pids.clear()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def _read_pid(path: Path, timeout: float = 20.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            text = path.read_text().strip()
            if text:
                return int(text)
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"no pid file {path}")


def _conf(root: Path, host: str, ctld_port: int, node_ports: list[int], munge_socket: Path) -> str:
    nodes = "\n".join(
        f"NodeName=n{i + 1} NodeHostname={host} NodeAddr=127.0.0.1 CPUs=1 RealMemory=2000 Port={port} State=UNKNOWN"
        for i, port in enumerate(node_ports)
    )
    return f"""# written by tests/slurm/_cluster.py
ClusterName=starverse-test
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: a requeued job waits this long before it may start again (default 120 s)
AuthInfo=socket={munge_socket},cred_expire=5
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# a node set DOWN by hand stays down until `scontrol update nodename=N state=resume`
ReturnToService=1
EnforcePartLimits=ALL
MpiDefault=none
JobRequeue=1
KillWait=10
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
{nodes}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName=small Nodes=n1 MaxNodes=1 State=UP
"""


def start_cluster(root: Path) -> SlurmCluster:
    """Start munged, slurmctld and slurmd n1, n2 under ``root``; wait until both nodes are idle."""
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)
    for d in ("state", "spool", "munge"):
        (root / d).mkdir(exist_ok=True)
    os.chmod(root / "munge", 0o700)
    host = socket.gethostname().split(".")[0]
    ctld_port, *node_ports = _free_ports(3)
    key, munge_socket = root / "munge" / "munge.key", root / "munge" / "munge.sock"
    subprocess.run([_which("mungekey"), "-c", "-f", "-k", str(key)], check=True, capture_output=True)
    conf = root / "slurm.conf"
    conf.write_text(_conf(root, host, ctld_port, node_ports, munge_socket))
    cluster = SlurmCluster(root, conf, host)
    env = {**os.environ, **cluster.env}
    try:
        subprocess.run(
            [
                _which("munged"),
                "--force",
                f"--key-file={key}",
                f"--socket={munge_socket}",
                f"--pid-file={root / 'munge' / 'munged.pid'}",
                f"--log-file={root / 'munge' / 'munged.log'}",
                f"--seed-file={root / 'munge' / 'munged.seed'}",
            ],
            check=True,
            capture_output=True,
            timeout=30,
        )
        cluster.pids.append(_read_pid(root / "munge" / "munged.pid"))
        subprocess.run([_which("slurmctld"), "-c", "-i"], env=env, check=True, capture_output=True, timeout=30)
        cluster.pids.append(_read_pid(root / "slurmctld.pid"))
        for node in cluster.nodes:
            subprocess.run([_which("slurmd"), "-N", node], env=env, check=True, capture_output=True, timeout=30)
            cluster.pids.append(_read_pid(root / f"slurmd-{node}.pid"))
        cluster.wait_idle()
    except BaseException:
        cluster.stop()
        raise
    return cluster
