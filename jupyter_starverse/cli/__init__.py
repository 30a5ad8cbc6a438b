"""``starverse``: the command line, and the parser table the ``%sv`` magics share.

Each command group lives in its own module with ``register(subparsers)``; a command is a
function ``run(client, args) -> object`` whose result the front door renders.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from ..errors import StarverseError, missing_dependency
from ._common import (
    CommandParser,
    HelpShown,
    Presenter,
    UsageError,
    door_text,
    exit_code_for,
    interrupted_text,
    notes,
    render,
)

__all__ = ["HelpShown", "Presenter", "build_parser", "door_text", "main", "parse"]

# Command group modules (each has ``register``); add yours here.
_GROUPS = ("_info", "_cost", "_train", "_store", "_data", "_launch", "_jobs", "_demo", "_mode", "_pipeline", "_recipes",
           "_feedback", "_export", "_env", "_serve", "_eval")  # fmt: skip

# The top-level commands each module registers: a command line loads only its own module
# (loading all of them is most of a quick command's time); keep in step with ``_GROUPS``.
_COMMANDS = {
    "info": "_info", "cost": "_cost", "train": "_train", "store": "_store", "mount": "_store", "data": "_data",
    "launch": "_launch", "jobs": "_jobs", "demo": "_demo", "mode": "_mode", "pipeline": "_pipeline",
    "recipes": "_recipes", "feedback": "_feedback", "chat": "_feedback", "align": "_feedback", "export": "_export",
    "env": "_env", "serve": "_serve", "eval": "_eval",
}  # fmt: skip

# Each command's one-line help, for `starverse --help` (and `%sv --help`) without importing
# every command module (that import was most of its time: 3x `jobs ls`). A test checks that
# this help is the same text the full parser prints.
_SUMMARIES = {
    "info": "show version, store, backend, mode and currency",
    "cost": "prices, estimates before launch, running costs, per-user totals",
    "train": "%%sv train: launch the cell body as a training script and show the live monitor",
    "store": "datasets and Hugging Face models on the shared store",
    "mount": "path of a pulled store entry (%%sv mount returns a pathlib.Path)",
    "data": "data preparation: sensitive fields, dedup, quality, as new dataset versions",
    "launch": "run a training script on N nodes x P processes (local processes, Kubernetes or Slurm)",
    "jobs": "list, inspect, follow, wait for and cancel jobs (alone: jobs ls)",
    "demo": "train a small LM on 2 local nodes x 2 processes from a demo dataset",
    "mode": "show or switch the GPU/CPU mode of the workspace (notebook variables are kept)",
    "pipeline": "check, price, export and run .svpipeline files",
    "recipes": "training recipes: CPT, SFT, DPO, KTO, reward, frameworks, reproductions",
    "feedback": "thumbs up/down on answers: logs, versions, preference pairs and labels",
    "chat": "ask a model one question (streamed); optionally vote on the answer",
    "align": "align a model on a feedback version: DPO (pairs), KTO (labels) or a reward model",
    "export": "export a model to ONNX (fp32, INT8, INT4) with a parity report, or build a TensorRT-LLM engine",
    "env": "job environments on the store (ls, show, rm, build, image)",
    "serve": "serve a model as an OpenAI-compatible API (here, or rendered for Kubernetes / Slurm)",
    "eval": "score models on a labelled dataset (baselines side by side), compare a chain, list reports",
}

# Commands that run only inside a notebook kernel: listed, and marked so in the help.
_NOTEBOOK_ONLY = ("train",)
_NOTEBOOK_MARK = " (notebook only)"


class _VersionAction(argparse._VersionAction):
    """``--version``: the package metadata is read when asked for (reading it is most of a ``--help``)."""

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        from .._version import __version__

        self.version = f"jupyter_starverse {__version__}"
        super().__call__(parser, *args, **kwargs)


def build_parser(prog: str = "starverse", command: str | None = None, *, summary: bool = False) -> CommandParser:
    """The full parser tree (CLI and magics share it); with a known ``command``, only its group.

    ``summary``: every command by name and one-line help only, none of their modules imported
    (what ``starverse --help`` shows; a command line names its command, which loads its group).
    """
    parser = CommandParser(
        prog=prog,
        description="Train large models on rented GPUs: shared store, multi-node launch, costs, GPU/CPU modes.",
    )
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)
    if summary and command not in _COMMANDS:
        for name, text in _SUMMARIES.items():
            sub.add_parser(name, help=text)
    else:
        for name in (_COMMANDS[command],) if command in _COMMANDS else _GROUPS:
            importlib.import_module(f"{__name__}.{name}").register(sub)
    for action in sub._choices_actions:
        if action.dest in _NOTEBOOK_ONLY and not (action.help or "").endswith(_NOTEBOOK_MARK):
            action.help = f"{action.help or ''}{_NOTEBOOK_MARK}".strip()
    _mark_groups(parser)
    return parser


def _mark_groups(parser: argparse.ArgumentParser) -> None:
    """Each command group (a parser with its own actions) remembers itself, to show its own help.

    A hidden command (``help=argparse.SUPPRESS``) leaves its group's help: argparse before
    3.14 prints it as ``drive  ==SUPPRESS==``. Every ``--backend`` help names the three backends.
    """
    for action in parser._actions:
        if "--backend" in action.option_strings and "slurm" not in (action.help or ""):
            action.help = f"local, kubernetes or slurm; {action.help}" if action.help else "local, kubernetes or slurm"
        if isinstance(action, argparse._SubParsersAction):
            action._choices_actions = [a for a in action._choices_actions if a.help != argparse.SUPPRESS]
            for child in set(action.choices.values()):
                if any(isinstance(a, argparse._SubParsersAction) for a in child._actions):
                    child.set_defaults(_group_parser=child)
                _mark_groups(child)


def _check_request(args: argparse.Namespace) -> None:
    """Refuse option combinations that cannot mean what they say."""
    gpus = getattr(args, "gpus_per_node", None)
    gpu = getattr(args, "gpu", None)
    if gpus is not None and isinstance(gpu, str) and gpu.strip().lower() == "cpu":
        raise UsageError(
            f"--gpus-per-node {gpus} asks for GPUs, but --gpu cpu runs on CPUs",
            hint=f"for {gpus} CPU processes per node use --procs {gpus}; for GPUs name a type, e.g. --gpu a100-80g "
            "(see `starverse cost prices`)",
        )


def parse(
    argv: Sequence[str],
    *,
    prog: str = "starverse",
    cell: str | None = None,
    notebook: bool = False,
    presenter: Presenter | None = None,
) -> argparse.Namespace:
    """Parse ``argv``; attach the cell body, the notebook flag and the front door's presenter."""
    argv = list(argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(prog, command, summary=command is None)  # `--help` alone: the summary
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
    if getattr(args, "run", None) is None and getattr(args, "_group_parser", None) is not None:
        group: argparse.ArgumentParser = args._group_parser
        raise HelpShown(group.format_help())
    if getattr(args, "run", None) is None:
        raise UsageError("no command given", hint=f"usage: {parser.format_usage().strip()[7:]}; try --help")
    _check_request(args)
    args.cell = cell
    args.presenter = presenter if presenter is not None else Presenter()
    args.notebook = notebook or args.presenter.notebook
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point."""
    try:
        args = parse(sys.argv[1:] if argv is None else argv)
    except HelpShown as shown:
        try:
            print(shown.text, flush=True)
        except BrokenPipeError:  # `starverse --help | head`
            _quiet_stdout()
        return 0
    except UsageError as e:
        print(f"error: {e.message}\n{e.hint or ''}".rstrip(), file=sys.stderr)
        return 2
    except StarverseError as e:  # a check made while parsing (a bad --gpu, a name)
        print(f"error: {door_text(e)}", file=sys.stderr)
        return exit_code_for(e)
    from ..client import Starverse  # after parsing: `--help` needs no facade

    try:
        client = Starverse()
        result: Any = args.run(client, args)
        as_json = getattr(args, "json", False)
        for note in notes(result, as_json=as_json):
            print(note, file=sys.stderr, flush=True)
        for line in render(result, as_json=as_json):
            print(line, flush=True)
    except BrokenPipeError:
        # The reader went away (`starverse jobs logs ID | head -1`): stop quietly. Point stdout
        # at /dev/null so the interpreter's last flush does not complain again.
        _quiet_stdout()
        return 141
    except StarverseError as e:
        print(f"error: {door_text(e)}", file=sys.stderr)
        return exit_code_for(e)
    except ModuleNotFoundError as e:
        missing = missing_dependency(e)  # an optional package: its install hint, not a traceback
        if missing is None:
            raise
        print(f"error: {missing}", file=sys.stderr)
        return exit_code_for(missing)
    except KeyboardInterrupt:
        print(interrupted_text(), file=sys.stderr)  # the followed job's id and how to cancel it
        return 130
    return 0


def _quiet_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # stdout is no real file (tests capture it)
        pass
