"""``starverse mode`` (and ``%sv mode``): show or switch the workspace between GPU and CPU.

::

    starverse mode                       # current mode, price per hour, saved states
    starverse mode cpu --dry-run         # what a switch would change and cost
    starverse mode gpu --gpu h100-80g    # switch (Kubernetes: patch the workspace; Hub: profile)
    %sv mode cpu                         # in a notebook: save variables, switch, restart, restore
    %sv mode restore [STATE] [--skip X]  # restore saved variables into this kernel
    %sv mode --widget                    # the GPU/CPU toggle
    starverse mode discard STATE         # delete a saved state

In a notebook the kernel's variables are saved before anything changes (see
:mod:`jupyter_starverse.modes.switch_here` for what happens next).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ._common import add_json_flag

if TYPE_CHECKING:
    from jupyter_starverse.client import Starverse
    from jupyter_starverse.modes import RestoreReport, SwitchResult

__all__ = ["register"]

_ACTIONS = ("cpu", "gpu", "restore", "discard")


def _gpus(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError("--gpus must be at least 1")
    return value


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "mode",
        help="show or switch the GPU/CPU mode of the workspace (notebook variables are kept)",
        description="Without an action: show the mode. cpu/gpu: switch. restore: bring saved variables back "
        "into this kernel. discard: delete a saved state.",
    )
    p.add_argument("action", nargs="?", choices=_ACTIONS, help="cpu, gpu, restore or discard")
    p.add_argument("state", nargs="?", help="saved state id (restore, discard)")
    p.add_argument("--gpu", dest="gpu_type", metavar="TYPE", help="GPU type in gpu mode (e.g. a100-80g)")
    p.add_argument("--gpus", type=_gpus, metavar="N", help="GPUs of the workspace in gpu mode (default: as before)")
    p.add_argument("--force", action="store_true", help="switch even while a pull is running")
    p.add_argument("--dry-run", action="store_true", help="show what would change and the price; change nothing")
    p.add_argument("--skip", action="append", default=[], metavar="NAME", help="restore: leave this variable out")
    p.add_argument("--widget", action="store_true", help="in a notebook: show the GPU/CPU toggle")
    add_json_flag(p)
    p.set_defaults(run=_mode)


def _mode(client: Starverse, args: argparse.Namespace) -> object:
    from jupyter_starverse.errors import BadInputError
    from jupyter_starverse.modes import SwitchResult

    action = args.action
    if action in ("cpu", "gpu") and args.state:
        raise BadInputError(f"unexpected argument {args.state!r}", hint="usage: mode cpu|gpu [--gpu TYPE]")
    if action in ("cpu", "gpu") and args.skip:
        raise BadInputError("--skip only goes with restore", field="skip")
    if action is None and args.widget:
        return args.presenter.mode_toggle(client)
    if action is None:
        return client.modes.status()
    if action == "discard":
        return _discard(client, args)
    if action == "restore":
        return _restore(client, args)
    if args.dry_run:
        return client.modes.plan(action, gpu_type=args.gpu_type, gpus=args.gpus, force=args.force)
    if getattr(args, "notebook", False):
        return _switch_in_kernel(client, args)
    from jupyter_starverse.modes import switch_via_server

    # The Jupyter server owns the kernels: let it save and restore them.
    remote = switch_via_server(
        action,
        experiments=str(client.settings.experiments),
        gpu_type=args.gpu_type,
        gpus=args.gpus,
        force=args.force,
    )
    if remote is not None:
        return remote
    result = client.modes.switch(action, gpu_type=args.gpu_type, gpus=args.gpus, force=args.force)
    if result.outcome is not None and not result.outcome.restarts_workspace:
        result = SwitchResult(
            result.plan,
            result.outcome,
            message="running kernels keep their GPUs until they restart; switch from a notebook "
            "(%sv mode) or the status bar to restart them and keep their variables",
        )
    return result


def _discard(client: Starverse, args: argparse.Namespace) -> str:
    from jupyter_starverse.errors import BadInputError
    from jupyter_starverse.modes import discard_state

    if not args.state:
        raise BadInputError("which saved state?", field="state", hint="`starverse mode` lists them")
    discard_state(client.settings.home, args.state)
    return f"discarded saved state {args.state}"


def _restore(client: Starverse, args: argparse.Namespace) -> RestoreReport:
    from jupyter_starverse.errors import BadInputError
    from jupyter_starverse.modes import restore_here

    if not getattr(args, "notebook", False):
        raise BadInputError("restore brings variables back into a kernel", hint="run `%sv mode restore` in a notebook")
    return restore_here(client.modes, args.presenter.namespace(), state_id=args.state, skip=tuple(args.skip))


def _switch_in_kernel(client: Starverse, args: argparse.Namespace) -> SwitchResult:
    from jupyter_starverse.modes import switch_here

    return switch_here(
        client.modes, args.presenter.namespace(), args.action, gpu_type=args.gpu_type, gpus=args.gpus, force=args.force
    )
