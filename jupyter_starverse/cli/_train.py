"""``%%sv train --nodes 2 --procs 2 ...``: the cell body is the training script.

Returns the job's :class:`~jupyter_starverse.watch.JobWatch`, which the magics' presenter
shows as the live monitor; with ``--json`` it renders as the job record. The options
are those of ``starverse launch`` (:func:`~._launch.add_job_options`).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ._launch import add_job_options, job_fields, run_spec
from ._recipes import recipe_spec

if TYPE_CHECKING:
    from jupyter_starverse.client import Starverse
    from jupyter_starverse.jobmodel import JobSpec

__all__ = ["register", "spec_from_args"]


def spec_from_args(args: argparse.Namespace, code: str, *, default_accelerator: str = "cpu") -> JobSpec:
    """The :class:`JobSpec` the ``train`` options describe, with ``code`` as the script."""
    from jupyter_starverse.jobmodel import JobSpec

    return JobSpec(name=args.name, code=code, **job_fields(args, default_accelerator=default_accelerator))


def _train(client: Starverse, args: argparse.Namespace) -> object:
    from jupyter_starverse.client import LaunchPreview
    from jupyter_starverse.errors import BadInputError
    from jupyter_starverse.modes import SmokeResult

    code = args.cell
    if code is None and args.recipe is not None and args.notebook:
        code = ""  # `%sv train --recipe NAME ...` (a line): the recipe's own trainer
    if code is None:
        raise BadInputError(
            "train takes its script from the cell body of %%sv train",
            field="script",
            hint="in a terminal use `starverse launch SCRIPT --nodes N --procs P`",
        )
    if not code.strip() and args.recipe is None:  # with --recipe an empty cell runs the recipe's trainer
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
    fields = job_fields(args, default_accelerator=client.default_accelerator())
    spec = recipe_spec(client, args, fields, code=code if code.strip() else None)
    result = run_spec(client, args, spec or spec_from_args(args, code, default_accelerator=fields["accelerator"]))
    if isinstance(result, LaunchPreview):
        return result
    job = result.job if isinstance(result, SmokeResult) else result
    return args.presenter.show(client.watch(job.id, backend=job.backend))


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "train",
        help="%%sv train: launch the cell body as a training script and show the live monitor",
        description="Launch the cell body as a distributed training script (notebook only).",
    )
    p.add_argument("script_args", nargs="*", metavar="ARG", help="arguments passed to the script")
    p.add_argument("--name", default="train", help="job name (default: train)")
    add_job_options(p)
    p.set_defaults(run=_train)
