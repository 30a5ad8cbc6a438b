"""Guards against money that leaks while nobody looks.

- :class:`LossGuard`: a loss that is NaN or infinite for ``STARVERSE_NAN_STEPS`` logged steps in
  a row (default 3, ``0``: off) stops the job with :class:`NonFiniteLossError`, which names the
  steps and the last healthy checkpoint to resume from; nothing after a diverged step is worth
  paying for. ``log_metrics`` feeds it, and a checkpoint saved while the last logged loss is not
  finite is recorded unhealthy (:func:`loss_problem`), so no resume picks it.
- :class:`IdleTracker`: GPUs below a utilisation threshold for N minutes -> ``warn`` (at N minus
  the warning lead), then ``stop``. Used by the local supervisor for a job's GPUs and by the
  workspace's idle switch (``modes``); the utilisation comes from :func:`gpu_utilisation`.

Cheap: no thread, no import of torch.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from jupyter_starverse.experiments import latest_checkpoint

from ._env import job_env

__all__ = [
    "IdleTracker",
    "LossGuard",
    "NonFiniteLossError",
    "check_loss",
    "gpu_utilisation",
    "loss_problem",
    "resume_advice",
]

#: below this percentage of utilisation a GPU counts as idle
IDLE_BELOW_PERCENT = 5.0


class NonFiniteLossError(RuntimeError):
    """The loss was NaN or infinite for too many steps in a row: the job stops. The message names
    the last healthy checkpoint (step and path) and the command that resumes from it."""


class LossGuard:
    """Counts logged steps in a row whose loss (any value named ``loss`` or ``*_loss``) is not finite.

    It keeps count even when stopping is off (``limit`` 0): a checkpoint saved while the loss
    is not finite is recorded unhealthy (:meth:`problem`), whatever the limit.
    """

    def __init__(self, limit: int) -> None:
        self.limit = max(0, int(limit))
        self.first: int | None = None  # first step of the current non-finite run
        self.count = 0
        self.bad = ""  # the non-finite values of the last step that had one

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> LossGuard:
        raw = (os.environ if environ is None else environ).get("STARVERSE_NAN_STEPS", "").strip()
        try:
            return cls(int(raw) if raw else 3)
        except ValueError:
            return cls(3)

    def observe(self, step: int, values: Mapping[str, float]) -> None:
        """Raise :class:`NonFiniteLossError` once ``limit`` logged steps in a row had a bad loss."""
        losses = {k: v for k, v in values.items() if k == "loss" or k.endswith("_loss")}
        if not losses:
            return
        bad = {k: v for k, v in losses.items() if not math.isfinite(v)}
        if not bad:
            self.first, self.count, self.bad = None, 0, ""
            return
        self.first = step if self.first is None else self.first
        self.count += 1
        self.bad = ", ".join(f"{k}={v}" for k, v in sorted(bad.items()))
        if self.limit and self.count >= self.limit:
            raise NonFiniteLossError(
                f"the loss was not finite ({self.bad}) for {self.count} logged steps in a row "
                f"(steps {self.first} to {step}): stopping the job (STARVERSE_NAN_STEPS={self.limit}); "
                "resume from the last healthy checkpoint with a lower learning rate, or check the data"
            )

    def problem(self) -> str | None:
        """Why a checkpoint taken now is unhealthy (the last logged loss was not finite), else None."""
        if self.first is None:
            return None
        return f"the loss was not finite ({self.bad}) since step {self.first}"


_LOSS: list[LossGuard] = []


def _guard() -> LossGuard:
    if not _LOSS:
        _LOSS.append(LossGuard.from_env())
    return _LOSS[0]


def check_loss(step: int, values: Mapping[str, float]) -> None:
    """The process's :class:`LossGuard` (from the job environment) observes one logged step.

    The error it raises names the newest healthy checkpoint a ``--resume`` would start from.
    """
    try:
        _guard().observe(step, values)
    except NonFiniteLossError as err:
        raise NonFiniteLossError(f"{err}; {resume_advice()}") from None


def loss_problem() -> str | None:
    """Why a checkpoint saved now is unhealthy because of the logged loss (None: the loss is finite)."""
    return _guard().problem()


def resume_advice() -> str:
    """The newest healthy checkpoint of this job's experiment and the command that resumes from it."""
    env = job_env()
    if env.run_dir is None:
        return "no run folder: nothing was checkpointed"
    exp = env.run_dir.parent.parent if env.run_dir.parent.name == "runs" else env.run_dir
    try:
        ckpt = latest_checkpoint(exp)
    except OSError:
        ckpt = None
    if ckpt is None:
        return f"experiment {exp.name} has no healthy checkpoint yet: launch it again without --resume"
    return (
        f"the last healthy checkpoint is step {ckpt.step} ({ckpt.path}): "
        f"`starverse launch SCRIPT --experiment {exp.name} --resume` with this job's other options "
        "resumes from it (--dry-run shows the resume plan first)"
    )


@dataclass
class IdleTracker:
    """Idle time of GPUs from utilisation samples: ``observe`` answers ``ok``, ``warn`` or ``stop``.

    ``minutes``: idle time that stops (0: never); ``warn_minutes``: how long before that the
    warning comes. A sample of ``None`` (no reading) neither starts nor ends an idle stretch;
    ``busy`` (a running cell, a job step seen) ends it like a busy GPU does.
    """

    minutes: float
    warn_minutes: float = 5.0
    threshold: float = IDLE_BELOW_PERCENT
    idle_since: float | None = None

    def observe(self, now: float, utilisation: float | None, *, busy: bool = False) -> str:
        if not self.minutes:
            return "ok"
        if busy or (utilisation is not None and utilisation >= self.threshold):
            self.idle_since = None
            return "ok"
        if utilisation is None and self.idle_since is None:
            return "ok"
        if self.idle_since is None:
            self.idle_since = now
        idle = now - self.idle_since
        if idle >= self.minutes * 60:
            return "stop"
        if idle >= max(0.0, self.minutes - self.warn_minutes) * 60:
            return "warn"
        return "ok"

    def idle_minutes(self, now: float) -> float:
        return 0.0 if self.idle_since is None else (now - self.idle_since) / 60


def gpu_utilisation(devices: str | None = None, *, environ: Mapping[str, str] | None = None) -> float | None:
    """The highest utilisation (percent) of ``devices`` (``CUDA_VISIBLE_DEVICES`` form; all if None).

    ``STARVERSE_GPU_UTIL_FILE`` names a file holding the reading instead (tests, or an exporter
    that writes one); else ``nvidia-smi`` is asked. ``None`` when nothing can be read.
    """
    env = os.environ if environ is None else environ
    source = env.get("STARVERSE_GPU_UTIL_FILE", "").strip()
    if source:
        try:
            return float(Path(source).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    argv = [smi, "--query-gpu=index,utilization.gpu", "--format=csv,noheader,nounits"]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    wanted = {d.strip() for d in devices.split(",")} if devices else None
    readings = []
    for line in out.splitlines():
        index, _, util = line.partition(",")
        if wanted is None or index.strip() in wanted:
            try:
                readings.append(float(util))
            except ValueError:
                continue
    return max(readings) if readings else None
