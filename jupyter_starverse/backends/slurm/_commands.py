"""Talking to Slurm: its client programs run as argv lists, their output parsed, their errors translated.

Every call goes through :func:`run_slurm` (never a shell, never a string built from user
input). ``sbatch``'s stderr is translated once, here, into errors that name the fix.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from jupyter_starverse.errors import BackendUnavailableError, BadInputError, PermissionDeniedError, StarverseError
from jupyter_starverse.jobmodel import JobState

__all__ = [
    "INSTALL_HINT",
    "Partition",
    "SlurmJobInfo",
    "expand_hostlist",
    "job_state",
    "parse_fields",
    "parse_time",
    "partitions",
    "run_slurm",
    "sacct_job",
    "scontrol_job",
    "submit_error",
]

INSTALL_HINT = (
    "run where the Slurm client commands are installed (a login node, or `module load slurm`); "
    "on Debian/Ubuntu: apt-get install -y slurm-client (slurm-wlm for a whole cluster)"
)
TIMEOUT_S = 60.0
# variables of an enclosing job or torchrun that must not leak into a new job's environment
_STRIP = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")
_KEEP_SLURM = ("SLURM_CONF", "SLURM_CLUSTERS", "SLURM_TIME_FORMAT")


def submit_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment as the job should inherit it (``--export=ALL``), without the
    variables of an enclosing Slurm job or torchrun rank."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in _STRIP
        and not k.startswith("TORCHELASTIC_")
        and (not k.startswith(("SLURM_", "SBATCH_", "SRUN_")) or k in _KEEP_SLURM)
    }
    env.update(extra or {})
    return env


def run_slurm(
    argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = TIMEOUT_S, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run a Slurm client program; ``BackendUnavailableError`` when it is missing or hangs."""
    program = shutil.which(argv[0])
    if program is None:
        raise BackendUnavailableError(f"`{argv[0]}` is not on PATH: no Slurm client here", hint=INSTALL_HINT)
    try:
        proc = subprocess.run(
            [program, *argv[1:]],
            env=dict(env) if env is not None else submit_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise BackendUnavailableError(
            f"`{argv[0]}` did not answer within {timeout:.0f} s",
            hint="check that slurmctld is up (`scontrol ping`) and SLURM_CONF points at the cluster's slurm.conf",
        ) from None
    if check and proc.returncode != 0:
        raise _unavailable_or(proc, argv[0])
    return proc


def _unavailable_or(proc: subprocess.CompletedProcess[str], program: str) -> StarverseError:
    text = (proc.stderr or proc.stdout or "").strip()
    low = text.lower()
    if any(
        s in low
        for s in (
            "unable to contact slurm controller",
            "unable to process configuration file",
            "connection refused",
            "munge",
            "zero bytes were transmitted",
        )
    ):
        return BackendUnavailableError(
            f"{program}: the Slurm controller cannot be reached: {_last(text)}",
            hint="check `scontrol ping`, munged, and SLURM_CONF (the cluster's slurm.conf)",
        )
    return StarverseError(f"{program} failed (exit {proc.returncode}): {_last(text)}")


def _last(text: str, limit: int = 400) -> str:
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    return " / ".join(lines[-3:])[:limit] if lines else "no output"


def submit_error(
    stderr: str, *, partition: str | None, account: str | None, qos: str | None, nodes: int
) -> StarverseError:
    """The error ``sbatch``'s stderr describes, with the setting that fixes it."""
    text = stderr.strip()
    low = text.lower()
    said = _last(text)
    where = f"partition {partition!r}" if partition else "the default partition"
    if "invalid partition" in low:
        return BadInputError(
            f"Slurm has no partition {partition!r}: {said}",
            field="partition",
            hint="map the accelerator to a partition `sinfo -s` lists: "
            "STARVERSE_SLURM_PARTITIONS=cpu=NAME,a100-80g=NAME",
        )
    if "invalid qos" in low or ("qos" in low and ("policy" in low or "not allowed" in low or "invalid" in low)):
        return PermissionDeniedError(
            f"Slurm refused the QOS {qos!r}: {said}",
            hint="set STARVERSE_SLURM_QOS to a QOS of your association (`sacctmgr show assoc user=$USER format=qos`) "
            "or unset it for the default",
        )
    if "invalid account" in low or ("account" in low and ("not permitted" in low or "invalid" in low)):
        return PermissionDeniedError(
            f"Slurm refused the account {account!r} on {where}: {said}",
            hint="set STARVERSE_SLURM_ACCOUNT to an account you belong to "
            "(`sacctmgr show assoc user=$USER format=account,partition`)",
        )
    if "job violates accounting/qos policy" in low or "assocmaxsubmitjob" in low.replace(" ", ""):
        return PermissionDeniedError(
            f"Slurm refused the job under its accounting/QOS limits: {said}",
            hint="check your limits (`sacctmgr show assoc user=$USER`, `sacctmgr show qos`), "
            "or pick another STARVERSE_SLURM_ACCOUNT / STARVERSE_SLURM_QOS",
        )
    if (
        "node count specification invalid" in low
        or "more processors requested than permitted" in low
        or ("requested node configuration is not available" in low)
    ):
        return BadInputError(
            f"{where} cannot give {nodes} node(s) of this shape: {said}",
            field="nodes",
            hint="ask for fewer nodes or processes per node (`sinfo -p PARTITION` shows its nodes), "
            "or map the accelerator to a bigger partition in STARVERSE_SLURM_PARTITIONS",
        )
    if "invalid generic resource" in low or ("gres" in low and "invalid" in low):
        return BadInputError(
            f"{where} has no such GPUs: {said}",
            field="accelerator",
            hint="map the GPU type to a partition with GPUs (STARVERSE_SLURM_PARTITIONS), or try "
            "STARVERSE_SLURM_GPU_FLAG=gres",
        )
    if "time limit" in low and "invalid" in low:
        return BadInputError(
            f"Slurm refused the time limit: {said}",
            field="time",
            hint="lower STARVERSE_SLURM_TIME below the partition's MaxTime (`sinfo -o '%P %l'`)",
        )
    proc = subprocess.CompletedProcess(["sbatch"], 1, "", text)
    err = _unavailable_or(proc, "sbatch")
    if type(err) is StarverseError:
        return StarverseError(f"sbatch refused the job: {said}", hint="the full script is job.sbatch in the run folder")
    return err


@dataclass(frozen=True)
class Partition:
    """What a node-count check needs to know of a partition."""

    name: str
    max_nodes: int | None  # None: unlimited
    total_nodes: int
    default: bool
    state: str


def parse_fields(line: str) -> dict[str, str]:
    """``Key=Value Key2=Value with spaces ...`` (``scontrol -o``) as a dict."""
    out: dict[str, str] = {}
    for part in re.split(r"\s+(?=[A-Za-z][A-Za-z0-9/:_]*=)", line.strip()):
        key, sep, value = part.partition("=")
        if sep:
            out[key] = value.strip()
    return out


def partitions(env: Mapping[str, str] | None = None) -> dict[str, Partition]:
    """Every partition of the cluster (``scontrol show partition -o``)."""
    proc = run_slurm(["scontrol", "show", "partition", "-o"], env=env)
    out = {}
    for line in proc.stdout.splitlines():
        f = parse_fields(line)
        if "PartitionName" not in f:
            continue
        raw_max = f.get("MaxNodes", "UNLIMITED")
        out[f["PartitionName"]] = Partition(
            name=f["PartitionName"],
            max_nodes=int(raw_max) if raw_max.isdigit() else None,
            total_nodes=int(f.get("TotalNodes", "0") or 0),
            default=f.get("Default", "NO") == "YES",
            state=f.get("State", "UP"),
        )
    return out


@dataclass(frozen=True)
class SlurmJobInfo:
    """A Slurm job as ``scontrol show job`` or ``sacct`` reports it."""

    state: str  # Slurm's word: PENDING, RUNNING, COMPLETED, CANCELLED, NODE_FAIL, ...
    reason: str | None
    exit_code: int | None
    nodes: tuple[str, ...]
    restarts: int
    started: float | None
    finished: float | None
    requeue: bool = False


def parse_time(text: str | None) -> float | None:
    """``2026-12-01T03:08:19`` (local time) as epoch seconds; None for Unknown/None/N/A."""
    if not text or not text[0].isdigit():
        return None
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def expand_hostlist(text: str) -> tuple[str, ...]:
    """``n[1-2,5],gpu07`` -> ``(n1, n2, n5, gpu07)`` (Slurm's compressed host lists)."""
    if not text or text in ("(null)", "None"):
        return ()
    out: list[str] = []
    for item in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,\[]*", text):
        m = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", item)
        if not m:
            out.append(item)
            continue
        prefix, ranges, suffix = m.groups()
        for r in ranges.split(","):
            lo, _, hi = r.partition("-")
            if not hi:
                out.append(f"{prefix}{lo}{suffix}")
                continue
            width = len(lo)
            out.extend(f"{prefix}{str(i).zfill(width)}{suffix}" for i in range(int(lo), int(hi) + 1))
    return tuple(out)


def _exit_code(text: str | None) -> int | None:
    if not text:
        return None
    code, _, sig = text.partition(":")
    try:
        return -int(sig) if sig and int(sig) else int(code)
    except ValueError:
        return None


def scontrol_job(slurm_id: str, env: Mapping[str, str] | None = None) -> SlurmJobInfo | None:
    """The job as slurmctld knows it; None when it forgot it (finished longer than MinJobAge ago)."""
    proc = run_slurm(["scontrol", "show", "job", "-o", slurm_id], env=env, check=False)
    if proc.returncode != 0:
        if "invalid job id" in (proc.stderr or "").lower():
            return None
        raise _unavailable_or(proc, "scontrol")
    f = parse_fields(proc.stdout.splitlines()[0] if proc.stdout.strip() else "")
    if "JobState" not in f:
        return None
    reason = f.get("Reason")
    return SlurmJobInfo(
        state=f["JobState"],
        reason=None if reason in (None, "None", "(null)") else reason,
        exit_code=_exit_code(f.get("ExitCode")),
        nodes=expand_hostlist(f.get("NodeList", "")),
        restarts=int(f.get("Restarts", "0") or 0),
        started=parse_time(f.get("StartTime")),
        finished=parse_time(f.get("EndTime")),
        requeue=f.get("Requeue") == "1",
    )


def sacct_job(slurm_id: str, env: Mapping[str, str] | None = None) -> SlurmJobInfo | None:
    """The job from the accounting database; None without accounting or without a record."""
    if shutil.which("sacct") is None:
        return None
    proc = run_slurm(
        ["sacct", "-n", "-P", "-X", "-j", slurm_id, "-o", "State,ExitCode,NodeList,Start,End,Reason"],
        env=env,
        check=False,
    )
    lines = [x for x in proc.stdout.splitlines() if x.strip()]
    if proc.returncode != 0 or not lines:
        return None
    state, code, nodes, start, end, reason = (lines[-1].split("|") + [""] * 6)[:6]
    return SlurmJobInfo(
        state=state.split()[0] if state else "UNKNOWN",  # "CANCELLED by 0"
        reason=None if reason in ("", "None") else reason,
        exit_code=_exit_code(code),
        nodes=expand_hostlist(nodes),
        restarts=0,
        started=parse_time(start),
        finished=parse_time(end),
    )


_PENDING = {
    "PENDING",
    "CONFIGURING",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "RESV_DEL_HOLD",
    "SUSPENDED",
    "RESIZING",
}
_RUNNING = {"RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING", "STOPPED"}
_CANCELLED = {"CANCELLED", "REVOKED"}


_REQUEUED_AFTER = {"NODE_FAIL", "PREEMPTED", "BOOT_FAIL"}
REQUEUE_WINDOW_S = 60.0  # a requeuable job ended by these is requeued by slurmctld within moments


def job_state(slurm_state: str, *, requeue: bool = False, finished: float | None = None) -> JobState:
    """Slurm's state word as a :class:`JobState` (TIMEOUT, NODE_FAIL, PREEMPTED, OOM ... are failures).

    A requeuable job that just lost a node or was preempted is ``preempted``: slurmctld requeues
    it (a requeued job waiting again is ``resuming``, decided by the caller from its restart count).
    """
    word = slurm_state.split()[0].rstrip("+") if slurm_state else ""
    if word in _REQUEUED_AFTER and requeue and (finished is None or time.time() - finished < REQUEUE_WINDOW_S):
        return JobState.PREEMPTED
    if word in _PENDING:
        return JobState.PENDING
    if word in _RUNNING:
        return JobState.RUNNING
    if word == "COMPLETED":
        return JobState.SUCCEEDED
    if word in _CANCELLED:
        return JobState.CANCELLED
    return JobState.FAILED
