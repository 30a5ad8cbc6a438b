"""``%%sv train --nodes 2 --procs 2 ...``: the cell body is the training script.

Returns a :class:`~jupyter_starverse.widgets._handle.JobHandle`; in a notebook it displays
the live monitor, with ``--json`` (or on the CLI) it renders as the job record.
"""

from __future__ import annotations

import argparse
from decimal import Decimal

from jupyter_starverse.client import Starverse
from jupyter_starverse.errors import BadInputError
from jupyter_starverse.experiments import ExperimentPaths, plan_resume
from jupyter_starverse.launch import TEMPLATES, JobSpec
from jupyter_starverse.widgets._handle import JobHandle

from ._common import add_json_flag
from ._launch import LaunchPreview

__all__ = ["register", "spec_from_args"]


def _env_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def spec_from_args(args: argparse.Namespace, code: str, *, default_accelerator: str = "cpu") -> JobSpec:
    """The :class:`JobSpec` the ``train`` options describe, with ``code`` as the script."""
    return JobSpec(
        name=args.name,
        code=code,
        args=tuple(args.script_args),
        nodes=args.nodes,
        procs_per_node=args.procs,
        accelerator=args.gpu or default_accelerator,
        template=args.template,
        mounts=tuple(args.mount),
        env=dict(args.env),
        steps=args.steps,
        max_restarts=args.max_restarts,
        checkpoint_every=args.checkpoint_every,
        billing=args.billing,
        budget=args.budget,
        experiment=args.experiment,
        resume=args.resume,
    )


def _train(client: Starverse, args: argparse.Namespace) -> JobHandle | LaunchPreview:
    code = args.cell
    if code is None:
        raise BadInputError(
            "train takes its script from the cell body of %%sv train",
            field="script",
            hint="in a terminal use `starverse launch SCRIPT --nodes N --procs P`",
        )
    if not code.strip():
        raise BadInputError(
            "the cell is empty: nothing to train", field="script", hint="write the training script below %%sv train"
        )
    try:
        compile(code, "<%%sv train cell>", "exec")
    except SyntaxError as e:
        raise BadInputError(
            f"the training script has a syntax error on line {e.lineno}: {e.msg}",
            field="script",
            hint="fix the cell; nothing was launched",
        ) from None
    spec = client.prepare(spec_from_args(args, code, default_accelerator=client.default_accelerator()))
    backend = client.backend(args.backend)
    if args.dry_run:
        resume = None
        if spec.resume:
            exp = ExperimentPaths.of(client.settings.experiments, spec.experiment_name)
            resume = plan_resume(exp.root, new_world_size=spec.world_size)
        cost = client.costs.preview_or_reason(spec)  # costs: the price shown before launch
        return LaunchPreview("yaml", backend.render(spec, output="yaml"), resume, cost)
    job = client.smoke_launch(spec, backend=backend).job if args.smoke else backend.submit(spec)
    return JobHandle(client, job.id, backend=job.backend)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "train",
        help="%%sv train: launch the cell body as a training script and show the live monitor",
        description="Launch the cell body as a distributed training script (notebook only).",
    )
    p.add_argument("--name", default="train", help="job name (default: train)")
    p.add_argument("--nodes", type=int, default=1, help="number of nodes (default: 1)")
    p.add_argument("--procs", type=int, default=1, help="processes (GPUs) per node (default: 1)")
    p.add_argument("--template", choices=TEMPLATES, default="ddp", help="parallelism template (default: ddp)")
    p.add_argument("--mount", action="append", default=[], metavar="NAME", help="catalog entry to mount (repeatable)")
    p.add_argument("--steps", type=int, default=None, help="training steps (exported as STARVERSE_STEPS)")
    p.add_argument("--experiment", default=None, help="experiment name (default: the job name)")
    p.add_argument("--resume", action="store_true", help="continue from the experiment's latest checkpoint")
    p.add_argument(
        "--smoke", action="store_true", help="first run a few steps on local CPU processes; submit only if they pass"
    )
    p.add_argument(
        "--gpus-per-node", type=int, default=argparse.SUPPRESS, dest="procs", metavar="N", help="same as --procs"
    )
    p.add_argument("--backend", default=None, help="local or kubernetes (default: settings)")
    p.add_argument("--gpu", default=None, metavar="TYPE", help="GPU type (default: cpu)")
    p.add_argument("--budget", type=Decimal, default=None, help="stop gracefully once the cost reaches this amount")
    p.add_argument("--billing", default="on_demand", help="on_demand, daily, weekly or spot")
    p.add_argument("--max-restarts", type=int, default=0, help="worker group restarts on failure")
    p.add_argument("--checkpoint-every", type=int, default=None, metavar="STEPS", help="steps between checkpoints")
    p.add_argument("--env", action="append", type=_env_pair, default=[], metavar="KEY=VALUE", help="extra environment")
    p.add_argument(
        "--dry-run", action="store_true", help="print what would run (and the resume plan), start nothing"
    )
    p.add_argument("script_args", nargs="*", metavar="ARG", help="arguments passed to the script")
    add_json_flag(p)
    p.set_defaults(run=_train)
