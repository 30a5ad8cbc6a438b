"""What a Slurm job asks besides nodes and GPUs: CPUs and memory per node, the time limit's figures.

CPUs and memory: the figures here are per node, for all its ranks; the script asks
``--cpus-per-task`` of each rank's task (one task per rank) as that share over the ranks.
Without ``JobSpec.cpu`` / ``memory`` (``launch --cpu/--memory``) a GPU job asks, per GPU, the
share of the GPU type's typical 8-GPU host that a Kubernetes pod asks too (``kube.HOST_SHARE``:
one table of hosts); a CPU job asks one core per rank (so 8 ranks never share one core) and
leaves memory to the cluster's ``DefMemPerCPU``.

Time limit: the batch shell gets SIGTERM ``margin`` seconds before the limit (``--signal``), and
every rank checkpoints. A limit too short for start-up plus one checkpoint interval before that
signal would loop (signal, requeue, signal ...) without saving a step: :func:`check_time_limit`
refuses it at submit with the figures.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from jupyter_starverse.errors import BadInputError
from jupyter_starverse.jobmodel import JobSpec

__all__ = [
    "DEFAULT_SHARE",
    "START_UP_S",
    "TimePlan",
    "check_time_limit",
    "node_resources",
    "parse_slurm_time",
    "signal_margin",
]


#: what a GPU type's ranks get where the job names no --cpu/--memory: the same share of its typical
#: 8-GPU host as a Kubernetes pod asks (``kube.HOST_SHARE``, with the hosts it was taken from)
DEFAULT_SHARE = ("8", "64Gi")


def _share(accelerator: str) -> tuple[int, int, str]:
    """``(CPUs, GiB, source)`` per GPU of ``accelerator``."""
    from jupyter_starverse.kube import HOST_SHARE

    cpu, memory = HOST_SHARE.get(accelerator, DEFAULT_SHARE)
    gib = int(memory[:-2]) if memory.endswith("Gi") else int(memory)
    return _cpus(cpu), gib, f"{cpu} CPUs + {memory} per {accelerator} GPU, its typical host's share"


def node_resources(spec: JobSpec) -> tuple[int, str | None, str]:
    """``(cpus per node, memory per node or None, where the figures come from)``."""
    share = _share(spec.accelerator) if spec.is_gpu else None
    if spec.cpu is not None:
        cpus, source = _cpus(spec.cpu), "launch --cpu"
    elif share is not None:
        cpus, source = share[0] * spec.procs_per_node, share[2]
    else:
        cpus, source = spec.procs_per_node, "one core per rank"
    if spec.memory is not None:
        return cpus, str(spec.memory), source
    if share is not None:
        return cpus, f"{share[1] * spec.procs_per_node}Gi", source
    return cpus, None, source


def _cpus(text: str) -> int:
    value = str(text).strip()
    try:
        cpus = int(value[:-1]) / 1000 if value.endswith("m") else float(value)
    except ValueError:
        raise BadInputError(
            f"cpu {text!r} is not a CPU count", field="cpu", hint="give whole CPUs per node, e.g. --cpu 16"
        ) from None
    whole = max(1, -int(-cpus // 1))  # Slurm counts whole CPUs: round up
    return int(whole)


# -- time limit -----------------------------------------------------------------------------

#: seconds from the batch script's start to the first training step (srun, torchrun, import torch, rendezvous)
START_UP_S = 90
#: a checkpoint interval of unknown step time: one minute of training at the least
MIN_INTERVAL_S = 60
#: the early warning: at most this many seconds before the limit, at least this many (a checkpoint's write)
MAX_MARGIN_S, MIN_MARGIN_S = 120, 30

_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d{1,2}))?(?::(\d{1,2}))?$")


def parse_slurm_time(text: str | None) -> int | None:
    """Slurm's ``--time`` in seconds (None: no limit or the partition's): ``MM``, ``MM:SS``,
    ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``."""
    if text is None or text.strip().lower() in ("unlimited", "infinite", ""):
        return None
    m = _TIME.match(text.strip())
    if not m:
        raise BadInputError(f"{text!r} is not a Slurm time limit", field="time", hint="e.g. 2-00:00:00 or 04:00:00")
    days, a, b, c = m.groups()
    if days is not None:  # D-HH[:MM[:SS]]
        return int(days) * 86400 + int(a) * 3600 + int(b or 0) * 60 + int(c or 0)
    if c is not None:  # HH:MM:SS
        return int(a) * 3600 + int(b) * 60 + int(c)
    return int(a) * 60 + int(b or 0)  # MM[:SS]


def signal_margin(limit_s: int | None) -> int:
    """Seconds before the limit at which the batch shell gets SIGTERM: a quarter of the limit,
    between 30 s and 120 s (a short limit keeps most of its time for training)."""
    if limit_s is None:
        return MAX_MARGIN_S
    return max(MIN_MARGIN_S, min(MAX_MARGIN_S, limit_s // 4))


@dataclass(frozen=True)
class TimePlan:
    """The figures of a time limit: when the warning lands and what has to fit before it."""

    limit_s: int
    margin_s: int
    start_up_s: int
    interval_s: int
    interval_source: str

    @property
    def usable_s(self) -> int:
        return self.limit_s - self.margin_s

    @property
    def needed_s(self) -> int:
        return self.start_up_s + self.interval_s

    @property
    def fits(self) -> bool:
        return self.usable_s >= self.needed_s


def check_time_limit(spec: JobSpec, limit: str | None, *, step_s: float | None = None) -> TimePlan | None:
    """Refuse a limit that ends before the first checkpoint could be written (None: no limit)."""
    limit_s = parse_slurm_time(limit)
    if limit_s is None:
        return None
    if step_s is not None and spec.checkpoint_every:
        interval = int(-(-spec.checkpoint_every * step_s // 1))
        source = f"{spec.checkpoint_every} steps x {step_s:.2f} s per step of the experiment's last run"
    else:
        interval, source = MIN_INTERVAL_S, "one minute of training (no step time known yet)"
    plan = TimePlan(limit_s, signal_margin(limit_s), START_UP_S, max(interval, 1), source)
    if not plan.fits:
        need = plan.needed_s + signal_margin(plan.needed_s * 2)
        raise BadInputError(
            f"the Slurm time limit {limit} ({limit_s} s) is too short to reach a first checkpoint: "
            f"start-up ~{plan.start_up_s} s + checkpoint interval ~{plan.interval_s} s ({source}) = "
            f"{plan.needed_s} s, but the early warning (SIGTERM to checkpoint) lands {plan.margin_s} s before "
            f"the limit, at {plan.usable_s} s; the job would be requeued again and again without saving a step",
            field="time",
            hint=f"raise STARVERSE_SLURM_TIME to at least {-(-need // 60)} minutes"
            + (", or checkpoint more often (--checkpoint-every)" if spec.checkpoint_every else ""),
        )
    return plan
