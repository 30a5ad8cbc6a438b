"""``starverse cost ...`` (and ``%sv cost ...``): prices, estimates, comparisons, meters, totals.

::

    starverse cost estimate --gpu rtx4090 --cards 32 --hours 4            # 230.40 CNY
    starverse cost estimate --gpu rtx4090 --cards 32 --duration 3d --billing all
    starverse cost estimate --gpu rtx4090 --cards 32 --hours 4 --compare  # every GPU type
    starverse cost estimate --mixed rtx4090:256,a100-80g:128 --duration 12d  # a plan across GPU types
    starverse cost prices
    starverse cost total [--user NAME]
    starverse cost job JOB_ID
"""

from __future__ import annotations

import argparse
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING

from ._common import add_json_flag

if TYPE_CHECKING:
    from jupyter_starverse.client import Starverse
    from jupyter_starverse.costs import (
        Comparison,
        Cost,
        Estimate,
        MixedPlan,
        PriceTable,
        Resources,
        UserTotal,
    )

__all__ = ["register"]


def _hours(text: str) -> Decimal:
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of hours") from None
    if not value.is_finite():
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of hours")
    return value


def _count(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def _duration(args: argparse.Namespace) -> Decimal:
    from jupyter_starverse.costs import parse_duration
    from jupyter_starverse.errors import BadInputError

    if args.hours is not None and args.duration is not None:
        raise BadInputError("give either --hours or --duration, not both", field="duration")
    if args.hours is not None:
        return args.hours * 3600  # type: ignore[no-any-return]
    if args.duration is not None:
        return parse_duration(args.duration)
    raise BadInputError("how long will the job run?", field="duration", hint="add --hours 4 or --duration 3d")


def _resources(client: Starverse, args: argparse.Namespace) -> Resources:
    from jupyter_starverse.costs import Resources

    accelerator = args.gpu
    if accelerator is None:
        mode = client.mode
        accelerator = mode.gpu_type if mode.kind == "gpu" and mode.gpu_type else "cpu"
    return Resources(accelerator, args.cards)


def _estimate(client: Starverse, args: argparse.Namespace) -> Estimate | Comparison | MixedPlan:
    from jupyter_starverse.errors import BadInputError

    if args.mixed is not None:
        if args.gpu is not None or args.compare is not None or args.billing == "all":
            raise BadInputError(
                "--mixed plans its own pools: it takes no --gpu, --compare or --billing all",
                field="mixed",
                hint="e.g. cost estimate --mixed rtx4090:256,a100-80g:128 --duration 12d [--billing weekly]",
            )
        return client.costs.mixed(args.mixed, _duration(args), args.billing)
    resources = _resources(client, args)
    seconds = _duration(args)
    if args.compare is None and args.billing != "all":
        return client.costs.estimate(resources, seconds, args.billing)
    billings = None if args.billing == "all" else [args.billing]
    if args.compare is None:
        accelerators = None
    else:
        accelerators = args.compare or ["all"]
        if args.compare and resources.accelerator not in args.compare:
            accelerators = [resources.accelerator, *args.compare]
    return client.costs.compare(resources, seconds, billings=billings, accelerators=accelerators)


def _prices(client: Starverse, args: argparse.Namespace) -> PriceTable:
    return client.costs.prices


def _total(client: Starverse, args: argparse.Namespace) -> UserTotal:
    return client.cost_total(args.user)  # every backend's runs, cluster jobs metered first


def _job(client: Starverse, args: argparse.Namespace) -> Cost:
    job = client.attach(args.job_id, backend=args.backend)
    return client.costs.meter(job)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from jupyter_starverse.jobmodel import BILLING_MODES

    cost = sub.add_parser("cost", help="prices, estimates before launch, running costs, per-user totals")
    cmds = cost.add_subparsers(dest="cost_command", metavar="SUBCOMMAND", parser_class=type(cost))

    p = cmds.add_parser(
        "estimate",
        help="what a job costs: per second, daily/weekly packages, spot, CPU",
        description="Estimate the cost of running COUNT cards of a GPU type for a while. "
        "Money is exact: each started second is billed, the total rounded once (half up).",
    )
    p.add_argument("--gpu", metavar="TYPE", help="GPU type (see `cost prices`) or 'cpu'; default: the current mode")
    p.add_argument("--cards", type=_count, default=1, metavar="N", help="GPU cards (CPU nodes with --gpu cpu)")
    p.add_argument("--hours", type=_hours, metavar="H", help="run time in hours (decimals allowed)")
    p.add_argument("--duration", metavar="TEXT", help="run time with units: 90m, 4h, 2h30m, 3d, 1w")
    p.add_argument(
        "--billing",
        choices=[*BILLING_MODES, "all"],
        default="on_demand",
        help="billing mode; 'all' compares them side by side (default on_demand)",
    )
    p.add_argument(
        "--compare",
        nargs="*",
        metavar="TYPE",
        help="also price these GPU types (all types when none given) and name the cheapest",
    )
    p.add_argument(
        "--mixed",
        metavar="TYPE:CARDS,...",
        help="a plan across GPU types (rtx4090:256,a100-80g:128): each pool, a stage per pool, one job over "
        "both and each single type, priced for the same work",
    )
    add_json_flag(p)
    p.set_defaults(run=_estimate)

    p = cmds.add_parser("prices", help="the price table in force")
    add_json_flag(p)
    p.set_defaults(run=_prices)

    p = cmds.add_parser("total", help="what a user has spent over all experiments")
    p.add_argument("--user", help="user name (default: you)")
    add_json_flag(p)
    p.set_defaults(run=_total)

    p = cmds.add_parser("job", help="what a job has cost so far (live meter)")
    p.add_argument("job_id", metavar="JOB_ID")
    p.add_argument("--backend", help="local, kubernetes or slurm: the backend of the job (default: the configured one)")
    add_json_flag(p)
    p.set_defaults(run=_job)
