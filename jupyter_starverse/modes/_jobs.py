"""One JobSpec, two translations: what a job becomes in CPU mode and in GPU mode.

Pure functions over :class:`~jupyter_starverse.jobmodel.JobSpec` (they only call
``spec.replace``), plus :func:`smoke_then_submit`, which runs a few steps in CPU mode on a
local backend before an expensive launch and only then submits the real job.

The chosen communication backend and device reach the training script through three
environment variables that ``runtime/`` reads: ``STARVERSE_MODE``,
``STARVERSE_DIST_BACKEND`` (``gloo``/``nccl``) and ``STARVERSE_DEVICE`` (``cpu``/``cuda``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jupyter_starverse.errors import BadInputError, ConflictError

if TYPE_CHECKING:
    from jupyter_starverse.jobmodel import Job, JobSpec, LaunchBackend

    from ._mode import Mode

__all__ = ["JOB_ENV", "SmokeResult", "make_smoke_spec", "smoke_then_submit", "translate_spec"]

#: Variables set on every translated job (names only; values depend on the mode).
JOB_ENV = ("STARVERSE_MODE", "STARVERSE_DIST_BACKEND", "STARVERSE_DEVICE")
SMOKE_STEPS = 3
_SMOKE_SUFFIX = "-smoke"


def translate_spec(spec: JobSpec, mode: Mode, *, cpu_image: str | None = None) -> JobSpec:
    """The job ``spec`` as it runs in ``mode``.

    CPU mode: accelerator ``cpu`` (no GPU requests, CPU node pool), gloo, the CPU image
    variant when one is configured. GPU mode: nccl/cuda and the mode's GPU type, unless the
    spec already names a GPU type of its own.

    Parameters
    ----------
    spec
        The job as the user wrote it.
    mode
        The mode to run it in (usually the workspace's current mode).
    cpu_image
        Image used in CPU mode instead of the spec's (``Settings.cpu_image``).
    """
    env = dict(spec.env)
    if mode.kind == "cpu":
        env.update(STARVERSE_MODE="cpu", STARVERSE_DIST_BACKEND="gloo", STARVERSE_DEVICE="cpu")
        changes: dict[str, Any] = {"accelerator": "cpu", "env": env}
        if cpu_image:
            changes["image"] = cpu_image
        return spec.replace(**changes)
    env.update(STARVERSE_MODE="gpu", STARVERSE_DIST_BACKEND="nccl", STARVERSE_DEVICE="cuda")
    accelerator = spec.accelerator if spec.is_gpu else mode.gpu_type
    return spec.replace(accelerator=accelerator, env=env)


def make_smoke_spec(spec: JobSpec, *, steps: int = SMOKE_STEPS, cpu_image: str | None = None) -> JobSpec:
    """A small CPU rehearsal of ``spec``: one node, the fewest ranks its parallelism allows.

    Keeps the script, arguments, mounts and parallelism template, so a wrong path, a
    shape error or a broken tensor/pipeline split shows up in seconds on the CPU. Runs in
    its own experiment (``<experiment>-smoke``) so it never touches the real checkpoints.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise BadInputError(f"smoke steps must be a whole number >= 1, got {steps!r}", field="steps")
    from ._mode import Mode

    model_parallel = spec.tensor_parallel * spec.pipeline_parallel
    # Two data-parallel ranks exercise the gradient all-reduce; one if the real job has one.
    data_parallel = 2 if spec.world_size // model_parallel >= 2 else 1
    env = dict(spec.env)
    env["STARVERSE_SMOKE"] = "1"
    cpu = translate_spec(spec, Mode("cpu"), cpu_image=cpu_image)
    return cpu.replace(
        name=_suffixed(spec.name),
        experiment=_suffixed(spec.experiment_name),
        nodes=1,
        procs_per_node=model_parallel * data_parallel,
        steps=min(steps, spec.steps) if spec.steps else steps,
        checkpoint_every=None,
        max_restarts=0,
        billing="on_demand",
        budget=None,
        resume=False,
        env=env | dict(cpu.env),
        secrets={},
    )


def _suffixed(name: str) -> str:
    return name[: 63 - len(_SMOKE_SUFFIX)].rstrip("._-") + _SMOKE_SUFFIX


@dataclass(frozen=True)
class SmokeResult:
    """The CPU rehearsal that ran, and the real job submitted after it passed."""

    smoke: Job
    job: Job

    def to_json(self) -> dict[str, Any]:
        return {"smoke": self.smoke.to_json(), "job": self.job.to_json()}

    def __str__(self) -> str:
        return (
            f"smoke run {self.smoke.id}: {self.smoke.state.value}\n"
            f"submitted {self.job.id} on {self.job.backend} ({self.job.spec.accelerator})"
        )


def smoke_then_submit(
    real: JobSpec,
    rehearsal: JobSpec,
    *,
    smoke_backend: LaunchBackend,
    backend: LaunchBackend,
    timeout: float | None = 600.0,
) -> SmokeResult:
    """Run ``rehearsal`` (:func:`make_smoke_spec`) on ``smoke_backend``, then submit ``real`` on ``backend``.

    ``real`` is the job already translated for its mode (``Starverse.prepare``); it is
    only submitted when the rehearsal succeeded; otherwise :class:`ConflictError` says why
    and nothing expensive started. A rehearsal still going after ``timeout`` seconds is
    cancelled. Every front door reaches this through ``Starverse.launch(spec, smoke=True)``.
    """
    from jupyter_starverse.jobmodel import JobState

    smoke = smoke_backend.submit(rehearsal)
    done = smoke_backend.wait(smoke.id, timeout=timeout)
    if not done.state.finished:
        done = smoke_backend.cancel(smoke.id)
        raise ConflictError(
            f"the smoke run {smoke.id} did not finish within {timeout:g} s; the real job was not submitted",
            hint="lower the smoke steps, or launch without --smoke",
        )
    if done.state is not JobState.SUCCEEDED:
        tail = _log_tail(smoke_backend, smoke.id)
        raise ConflictError(
            f"the smoke run {smoke.id} {done.state.value}"
            + (f" ({done.reason})" if done.reason else "")
            + "; the real job was not submitted"
            + (f"\nlast lines:\n{tail}" if tail else ""),
            hint=f"fix the script and try again; logs are in {done.experiment_dir}",
        )
    return SmokeResult(smoke=done, job=backend.submit(real))


def _log_tail(backend: LaunchBackend, job_id: str, lines: int = 10) -> str:
    try:
        out = [line.render() for line in backend.tail(job_id, lines=lines)]
    except Exception:  # logs are a courtesy in an error message; the failure itself is reported
        return ""
    return "\n".join(out[-lines:])
