"""``starverse``: the command line, and the parser table the ``%sv`` magics share.

Each command group lives in its own module with ``register(subparsers)``; a command is a
function ``run(client, args) -> object`` whose result the front door renders.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any

from .._version import __version__
from ..errors import StarverseError
from ._common import CommandParser, HelpShown, Presenter, UsageError, exit_code_for, render

__all__ = ["HelpShown", "Presenter", "build_parser", "main", "parse"]

# Command group modules (each has ``register``); add yours here.
_GROUPS = ("_info", "_cost", "_train", "_store", "_launch", "_jobs", "_demo", "_mode")


def build_parser(prog: str = "starverse") -> CommandParser:
    """The full parser tree (CLI and magics share it)."""
    parser = CommandParser(
        prog=prog,
        description="Train large models on rented GPUs: shared store, multi-node launch, costs, GPU/CPU modes.",
    )
    parser.add_argument("--version", action="version", version=f"jupyter_starverse {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)
    for name in _GROUPS:
        importlib.import_module(f"{__name__}.{name}").register(sub)
    return parser


def parse(
    argv: Sequence[str],
    *,
    prog: str = "starverse",
    cell: str | None = None,
    notebook: bool = False,
    presenter: Presenter | None = None,
) -> argparse.Namespace:
    """Parse ``argv``; attach the cell body, the notebook flag and the front door's presenter."""
    parser = build_parser(prog)
    argv = list(argv)
    # `--` ends the options anywhere: what follows is the script's own arguments, even
    # after a positional SCRIPT (argparse alone would refuse `launch train.py -- --lr 1`).
    rest: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, rest = argv[:cut], argv[cut + 1 :]
    args = parser.parse_args(argv)
    if rest:
        if not hasattr(args, "script_args"):
            raise UsageError(
                f"{' '.join(rest)!r} after `--`: this command takes no script arguments",
                hint=f"usage: {parser.format_usage().strip()[7:]}",
            )
        args.script_args = [*args.script_args, *rest]
    if getattr(args, "run", None) is None:
        raise UsageError("no command given", hint=f"usage: {parser.format_usage().strip()[7:]}; try --help")
    args.cell = cell
    args.presenter = presenter if presenter is not None else Presenter()
    args.notebook = notebook or args.presenter.notebook
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point."""
    from ..client import Starverse

    try:
        args = parse(sys.argv[1:] if argv is None else argv)
    except HelpShown as shown:
        print(shown.text)
        return 0
    except UsageError as e:
        print(f"error: {e.message}\n{e.hint or ''}".rstrip(), file=sys.stderr)
        return 2
    try:
        client = Starverse()
        result: Any = args.run(client, args)
        for line in render(result, as_json=getattr(args, "json", False)):
            print(line, flush=True)
    except StarverseError as e:
        print(f"error: {e}", file=sys.stderr)
        return exit_code_for(e)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0
