"""``starverse launch SCRIPT --nodes N --procs P ...``: submit a training script.

Without SCRIPT the template's example script runs. ``--dry-run`` prints what would be
started (``-o yaml|json``) and, with ``--resume``, the resume plan.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._common import StatusLine, add_json_flag, tracking
from ._jobs import detail
from ._recipes import add_recipe_options, recipe_spec

if TYPE_CHECKING:
    from jupyter_starverse.client import LaunchPreview, Starverse
    from jupyter_starverse.jobmodel import (
        Job,
        JobSpec,
    )

if TYPE_CHECKING:  # modes and watch load asyncio and the experiments: a command imports them when it runs
    from jupyter_starverse.modes import SmokeResult

__all__ = ["add_job_options", "job_fields", "register", "run_spec", "spec_from_launch_args"]


def _env_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def _secret_pair(text: str) -> tuple[str, str]:
    """``NAME=REF`` of ``--secret``; a ``file:`` path becomes absolute. Never echoes REF (it may be the secret)."""
    from jupyter_starverse.jobmodel import parse_secret_ref

    key, sep, ref = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError("write NAME=REF, e.g. HF_TOKEN=env:HF_TOKEN or HF_TOKEN=file:~/.hf_token")
    kind, colon, where = ref.partition(":")
    if colon and kind == "file" and where:
        ref = f"file:{Path(where).expanduser().absolute()}"
    if parse_secret_ref(ref) is None:
        raise argparse.ArgumentTypeError(
            f"{key}: give a reference, not the secret itself: env:VAR, file:PATH or a Kubernetes secret-name/key"
        )
    return key, ref


def job_fields(args: argparse.Namespace, *, default_accelerator: str = "cpu") -> dict[str, Any]:
    """The JobSpec fields that the options of :func:`add_job_options` describe."""
    from jupyter_starverse.errors import BadInputError

    if args.procs is not None and args.gpus_per_node is not None and args.procs != args.gpus_per_node:
        raise BadInputError(
            f"--procs {args.procs} and --gpus-per-node {args.gpus_per_node} disagree",
            field="procs_per_node",
            hint="give one of them: each process drives one GPU",
        )
    procs = args.procs if args.procs is not None else args.gpus_per_node if args.gpus_per_node is not None else 1
    return {
        "args": tuple(args.script_args),
        "nodes": args.nodes,
        "procs_per_node": procs,
        "accelerator": args.gpu or default_accelerator,  # without --gpu: the workspace mode's
        "template": args.template,
        "tensor_parallel": args.tp,
        "pipeline_parallel": args.pp,
        "framework": args.framework,
        "mounts": tuple(args.mount),
        "env": dict(args.env),
        "secrets": dict(args.secret),
        "steps": args.steps,
        "max_restarts": args.max_restarts,
        "checkpoint_every": args.checkpoint_every,
        "billing": args.billing,
        "budget": args.budget,
        "experiment": args.experiment,
        "resume": args.resume,
        "image": args.image,
        "cpu": getattr(args, "cpu", None),
        "memory": getattr(args, "memory", None),
        # from a notebook the job gets the kernel's packages by default (--env-from image: only the image's)
        "env_from": _env_from(args),
        "workdir": str(Path(args.workdir).expanduser().absolute()) if args.workdir else None,
    }


def _env_from(args: argparse.Namespace) -> str | None:
    value: str | None = args.env_from or ("notebook" if getattr(args, "notebook", False) else None)
    if value is None or value in ("notebook", "image"):
        return value
    return str(Path(value).expanduser().absolute())  # a requirements / pyproject / lock file


def spec_from_launch_args(args: argparse.Namespace, *, default_accelerator: str = "cpu") -> JobSpec:
    """The :class:`JobSpec` the ``launch`` options describe (``--gpu`` or else ``default_accelerator``)."""
    from jupyter_starverse.backends import example_script
    from jupyter_starverse.jobmodel import JobSpec

    script = args.script or str(example_script(args.template))
    fields = job_fields(args, default_accelerator=default_accelerator)
    if fields["workdir"] is None and args.script and args.command is None and getattr(args, "notebook", False):
        fields["workdir"] = str(Path(script).expanduser().absolute().parent)  # in a notebook: the script's folder
    return JobSpec(
        name=args.name or Path(script).stem,  # any display name: JobSpec derives a valid id from it
        script=script if args.command is None else None,
        command=tuple(args.command) if args.command else None,
        **fields,
    )


def run_spec(client: Starverse, args: argparse.Namespace, spec: JobSpec) -> LaunchPreview | SmokeResult | Job:
    """Preview (``--dry-run``), rehearse then submit (``--smoke``), or submit ``spec``, through the facade.

    ``--kind`` picks the Kubernetes object kind, ``--port`` the local rendezvous port.
    """
    from jupyter_starverse._settings import Settings
    from jupyter_starverse.client import Starverse
    from jupyter_starverse.jobmodel import secret_env_warnings

    if args.kind is not None:
        client = Starverse(client.settings.replace(kube_kind=args.kind))
    pod = _pod_overrides(args)
    if pod:  # parsed and validated exactly as the STARVERSE_* defaults they override
        client = Starverse(Settings.from_env({**client.settings.to_env(), **pod}))
    backend = client.backend(args.backend, port=args.port)
    if args.dry_run:  # the preview carries the warnings (its notes go to stderr)
        return client.preview(spec, backend=backend, output=args.output)
    for warning in secret_env_warnings(spec.env):
        print(f"warning: {warning}", file=sys.stderr, flush=True)
    smoke: bool = args.smoke
    return client.launch(spec, backend=backend, smoke=smoke)


def _pod_overrides(args: argparse.Namespace) -> dict[str, str]:
    """Per-launch Kubernetes pod options as the ``STARVERSE_*`` values they override."""
    out: dict[str, str] = {}
    if args.pull_secret:
        out["STARVERSE_IMAGE_PULL_SECRETS"] = ",".join(args.pull_secret)
    if args.service_account:
        out["STARVERSE_SERVICE_ACCOUNT"] = args.service_account
    if args.priority_class:
        out["STARVERSE_PRIORITY_CLASS"] = args.priority_class
    if args.annotation:
        out["STARVERSE_POD_ANNOTATIONS"] = json.dumps(dict(args.annotation))
    if args.extra_resource:
        out["STARVERSE_EXTRA_RESOURCES"] = json.dumps(dict(args.extra_resource))
    if args.node_affinity:
        out["STARVERSE_NODE_AFFINITY"] = args.node_affinity
    if args.shm_size:
        out["STARVERSE_SHM_SIZE"] = args.shm_size
    if args.automount_token:
        out["STARVERSE_AUTOMOUNT_TOKEN"] = "true"  # noqa: S105 - a flag, not a secret
    return out


def _smoke_result() -> type[SmokeResult]:
    from jupyter_starverse.modes import SmokeResult

    return SmokeResult


def _smoke_experiment(client: Starverse, spec: JobSpec) -> str | None:
    from jupyter_starverse.errors import StarverseError
    from jupyter_starverse.modes import make_smoke_spec

    try:
        return make_smoke_spec(spec, cpu_image=client.settings.cpu_image).experiment_name
    except StarverseError:
        return None


def _phase_of(client: Starverse, job: Job) -> str:
    """What ``job`` does now (nodes starting, rendezvous, process group, training step)."""
    from jupyter_starverse.watch import read_rank_records, startup_phase

    points = client.watch(job.id, backend=job.backend).metrics() if job.state.active else []
    step = max((p.step for p in points), default=None)
    return startup_phase(job, read_rank_records(job), step=step)


class _SmokeFollower:
    """Says on the status line what the smoke run does while ``launch --smoke`` waits for it."""

    def __init__(self, client: Starverse, spec: JobSpec, line: StatusLine) -> None:
        self.client, self.line = client, line
        self.experiment = _smoke_experiment(client, spec)
        self.since = time.time() - 1.0
        self.job: Job | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="starverse-smoke-follow", daemon=True)

    def start(self) -> None:
        if self.experiment is not None:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)

    def _run(self) -> None:
        from jupyter_starverse.errors import StarverseError

        assert self.experiment is not None
        while not self._stop.wait(0.5):
            try:
                if self.job is None:
                    page = self.client.job_page(experiment=(self.experiment,), since=self.since, limit=1, sweep=False)
                    if not page.items or page.items[0].created < self.since:
                        continue
                    self.job = self.client.backend("local").get(page.items[0].id)
                job = self.client.backend("local").get(self.job.id)
                self.line.update(f"smoke test {job.id} on local CPU processes: {_phase_of(self.client, job)}")
            except StarverseError:
                continue


def _run_with_progress(client: Starverse, args: argparse.Namespace, spec: JobSpec) -> object:
    """``run_spec`` with a status line from the first second: checks, smoke test, submit, start-up.

    On a terminal the line then follows the new job until it trains (or ends); Ctrl-C leaves
    the job running and says its id and how to cancel or follow it.
    """
    from jupyter_starverse.jobmodel import Job

    line: StatusLine = args.presenter.status()
    follower = _SmokeFollower(client, spec, line) if args.smoke else None
    where = args.backend or client.settings.backend
    line.update(
        "smoke test: a few steps on local CPU processes first" if args.smoke
        else f"checking the script and mounts, submitting to {where}"
    )  # fmt: skip
    try:
        if follower is not None:
            follower.start()
        result = run_spec(client, args, spec)
    except KeyboardInterrupt:
        line.close()
        if follower is not None and follower.job is not None:
            with tracking(follower.job.id, "local", what="smoke run"):
                raise
        raise
    finally:
        if follower is not None:
            follower.stop()
    job = result.job if isinstance(result, _smoke_result()) else result
    if not isinstance(job, Job):
        line.close()
        return result
    line.update(f"submitted {job.id} to {job.backend}: {_phase_of(client, job)}")
    if line.tty and not args.notebook:
        with tracking(job.id, job.backend):
            while not job.state.finished:
                phase = _phase_of(client, job)
                line.update(f"{job.id}: {phase}")
                if phase.startswith("training"):
                    break
                time.sleep(0.5)
                job = client.backend(job.backend).get(job.id)
    line.close(f"job {job.id} on {job.backend}: follow it with `starverse jobs logs -f {job.id}`")
    return result if isinstance(result, _smoke_result()) else job


def _launch(client: Starverse, args: argparse.Namespace) -> object:
    from jupyter_starverse.jobmodel import Job

    fields = job_fields(args, default_accelerator=client.default_accelerator())
    spec = recipe_spec(client, args, fields) or spec_from_launch_args(args, default_accelerator=fields["accelerator"])
    if getattr(args, "mixed", None):
        return _launch_mixed(client, args, spec)
    result = run_spec(client, args, spec) if args.dry_run or args.json else _run_with_progress(client, args, spec)
    if not isinstance(result, Job):
        return result
    if args.notebook:  # in a kernel: the live monitor
        return args.presenter.show(client.watch(result.id, backend=result.backend))
    return detail(result, client)


def _launch_mixed(client: Starverse, args: argparse.Namespace, spec: JobSpec) -> object:
    """``launch --mixed``: the pools' shapes come from the plan, so --gpu/--nodes/--gpus-per-node are refused."""
    from jupyter_starverse.client import Starverse
    from jupyter_starverse.errors import BadInputError

    if args.gpu is not None or args.nodes != 1 or args.gpus_per_node is not None or args.smoke:
        raise BadInputError(
            "--mixed sizes every pool's job itself: it takes no --gpu, --nodes, --gpus-per-node or --smoke",
            field="mixed",
            hint="e.g. starverse launch train.py --mixed rtx4090:256,a100-80g:128 --dry-run",
        )
    if args.kind is not None:
        client = Starverse(client.settings.replace(kube_kind=args.kind))
    backend = client.backend(args.backend, port=args.port)
    if args.dry_run:
        return client.preview_mixed(spec, args.mixed, backend=backend, output=args.output)
    return client.launch_mixed(spec, args.mixed, backend=backend)


def add_job_options(p: argparse.ArgumentParser) -> None:
    """Options every launching command shares (``starverse launch``, ``%%sv train``)."""
    from jupyter_starverse.jobmodel import BILLING_MODES, FRAMEWORKS, TEMPLATES

    from ._names import BACKENDS, KUBE_KINDS

    p.add_argument("--nodes", type=int, default=1, help="number of nodes (default: 1)")
    p.add_argument("--procs", type=int, default=None, help="processes per node (default: 1)")
    p.add_argument("--gpus-per-node", type=int, default=None, metavar="N", help="GPUs (= processes) per node")
    p.add_argument("--gpu", default=None, metavar="TYPE", help="GPU type, e.g. a100-80g (default: the workspace mode)")
    p.add_argument("--template", choices=TEMPLATES, default="ddp", help="parallelism template (default: ddp)")
    p.add_argument("--tp", type=int, default=1, metavar="N", help="tensor parallel degree (tp template)")
    p.add_argument("--pp", type=int, default=1, metavar="N", help="pipeline parallel degree (pp template)")
    p.add_argument("--framework", choices=FRAMEWORKS, default="torch", help="torch, megatron or deepspeed")
    p.add_argument("--mount", action="append", default=[], metavar="NAME", help="catalog entry to mount (repeatable)")
    p.add_argument(
        "--cpu", default=None, metavar="N", help="CPUs per node (default: the GPU type's typical host share)"
    )
    p.add_argument("--memory", default=None, metavar="QUANTITY", help="memory per node, e.g. 256Gi (default: as --cpu)")
    p.add_argument("--steps", type=int, default=None, help="training steps (STARVERSE_STEPS)")
    p.add_argument("--checkpoint-every", type=int, default=None, metavar="STEPS", help="steps between checkpoints")
    p.add_argument("--max-restarts", type=int, default=0, help="restarts of a failed worker group or node")
    p.add_argument("--env", action="append", type=_env_pair, default=[], metavar="KEY=VALUE", help="extra environment")
    p.add_argument(
        "--secret", action="append", type=_secret_pair, default=[], metavar="NAME=REF",
        help="secret variable by reference, read only where the job starts: NAME=env:VAR, NAME=file:PATH "
        "(a file only you can read) or NAME=secret-name/key (Kubernetes); never written down (repeatable)",
    )  # fmt: skip
    p.add_argument("--experiment", default=None, help="experiment name (default: the job name)")
    p.add_argument("--resume", action="store_true", help="continue from the experiment's latest checkpoint")
    p.add_argument("--budget", type=Decimal, default=None, help="stop gracefully once the cost reaches this amount")
    p.add_argument("--billing", choices=BILLING_MODES, default="on_demand", help="billing mode (default: on_demand)")
    p.add_argument("--backend", choices=BACKENDS, default=None, help="local, kubernetes or slurm (default: settings)")
    p.add_argument("--kind", choices=KUBE_KINDS, default=None, help="Kubernetes object kind (kubernetes backend)")
    p.add_argument("--image", default=None, help="container image (kubernetes backend)")
    p.add_argument("--port", type=int, default=None, help="rendezvous port (local backend; default: a free one)")
    p.add_argument(
        "--env-from", default=None, metavar="notebook|image|FILE",
        help="packages of the job beyond its image: notebook (the kernel's; the default in a notebook), image "
        "(none; the default elsewhere) or a requirements.txt / pyproject.toml / lock; built once on the store",
    )  # fmt: skip
    p.add_argument(
        "--workdir", default=None, metavar="DIR",
        help="folder packed into the store and unpacked read-only as every rank's working folder (.starverseignore "
        "or .gitignore rules; default in a notebook: the script's folder)",
    )  # fmt: skip
    pod = p.add_argument_group("Kubernetes pod options (override the STARVERSE_* defaults and the pool table)")
    pod.add_argument("--pull-secret", action="append", default=[], metavar="NAME", help="imagePullSecret (repeatable)")
    pod.add_argument("--service-account", default=None, metavar="NAME", help="serviceAccountName of the pods")
    pod.add_argument("--priority-class", default=None, metavar="NAME", help="priorityClassName of the pods")
    pod.add_argument(
        "--annotation", action="append", type=_env_pair, default=[], metavar="KEY=VALUE", help="pod annotation"
    )
    pod.add_argument(
        "--extra-resource", action="append", type=_env_pair, default=[], metavar="NAME=COUNT",
        help="extra device limit of GPU pods, e.g. rdma/hca=1 (repeatable)",
    )  # fmt: skip
    pod.add_argument("--node-affinity", default=None, metavar="JSON", help="required node affinity (alternatives)")
    pod.add_argument("--shm-size", default=None, metavar="QUANTITY", help="sizeLimit of /dev/shm, e.g. 16Gi")
    pod.add_argument("--automount-token", action="store_true", help="mount the service-account token in the pods")
    p.add_argument(
        "--smoke", action="store_true", help="first run a few steps on local CPU processes; submit only if they pass"
    )
    p.add_argument("--dry-run", action="store_true", help="print what would start (and the resume plan); start nothing")
    p.add_argument(
        "-o",
        "--output",
        choices=("yaml", "json", "sbatch"),
        default="yaml",
        help="dry-run format (default: yaml; sbatch: the Slurm batch script alone)",
    )
    add_recipe_options(p)
    add_json_flag(p)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "launch",
        help="run a training script on N nodes x P processes (local processes, Kubernetes or Slurm)",
        description="Submit a training script. Without SCRIPT the --template example runs.",
    )
    p.add_argument("script", nargs="?", default=None, metavar="SCRIPT", help="Python training script")
    p.add_argument("script_args", nargs="*", metavar="ARG", help="arguments for the script (after --)")
    p.add_argument("--name", default=None, help="job name (default: the script's name)")
    p.add_argument("--command", nargs="+", default=None, metavar="ARGV", help="run this command instead of a script")
    p.add_argument(
        "--mixed",
        default=None,
        metavar="TYPE:CARDS,...",
        help="the split plan of `cost estimate --mixed`: one job per GPU pool (rtx4090:256,a100-80g:128), "
        "each told its stage and share (STARVERSE_MIXED_*); with --dry-run every pool's plan is printed",
    )
    add_job_options(p)
    p.set_defaults(run=_launch)
