"""``starverse feedback ...``, ``chat`` and ``align`` (and ``%sv ...``): thumbs up/down to alignment.

| command                                                        | returns                  |
|----------------------------------------------------------------|--------------------------|
| feedback ls                                                    | FeedbackLogs             |
| feedback add LOG --model M --prompt P --answer A --up/--down [--better B] [--comment C] | FeedbackRecord |
| feedback show LOG[@N]                                          | FeedbackTable            |
| feedback snapshot LOG                                          | FeedbackSnapshot (LOG@N) |
| feedback export LOG[@N] --kind pairs|labels|records -o FILE    | SnapshotFile             |
| chat MODEL --prompt P [--feedback LOG --up/--down ...]         | the answer, streamed     |
| chat --endpoint ID|URL [--token env:NAME] --prompt P [...]     | the served model's answer |
| align LOG[@N] --model hf:ORG/REPO --method dpo|kto|reward [job options] | Job, or a preview with --dry-run |

In a notebook the chat widget (``jupyter_starverse.widgets.chat.ChatWidget``) is the
interactive way to chat and vote; ``chat`` here answers one prompt.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ._common import add_json_flag
from ._launch import add_job_options, job_fields, run_spec

if TYPE_CHECKING:
    from jupyter_starverse.client import Starverse

__all__ = ["ChatAnswer", "register"]


@dataclass(frozen=True)
class ChatAnswer:
    """One answer of ``chat``, and the feedback recorded on it (if any)."""

    model: str
    prompt: str
    text: str
    tokens: int
    seconds: float
    answer_id: str
    feedback: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        return self.text

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.text)


def _vote(args: argparse.Namespace) -> str | None:
    return "up" if args.up else "down" if args.down else None


def _ls(client: Starverse, args: argparse.Namespace) -> object:
    return client.feedback.ls()


def _add(client: Starverse, args: argparse.Namespace) -> object:
    return client.feedback.record(
        args.log,
        model=args.model,
        prompt=args.prompt,
        answer=args.answer,
        vote=_vote(args),
        better=args.better,
        comment=args.comment,
        answer_id=args.answer_id,
    )


def _show(client: Starverse, args: argparse.Namespace) -> object:
    return client.feedback.table(args.ref)


def _snapshot(client: Starverse, args: argparse.Namespace) -> object:
    return client.feedback.snapshot(args.log)


def _export(client: Starverse, args: argparse.Namespace) -> object:
    return client.feedback.export(args.ref, args.kind, args.output)


def _chat(client: Starverse, args: argparse.Namespace) -> object:
    from jupyter_starverse.errors import BadInputError

    if args.feedback is None and (_vote(args) or args.better or args.comment):
        raise BadInputError("--up/--down/--better/--comment need --feedback LOG", field="feedback",
                            hint="name the log the vote goes to, e.g. --feedback chat")  # fmt: skip
    if (args.model is None) == (args.endpoint is None):
        raise BadInputError("give a MODEL or --endpoint ID|URL (one of them)", field="model",
                            hint="e.g. `starverse chat hf:ORG/REPO@REV` or `starverse chat --endpoint ID`")  # fmt: skip
    if args.prompt is None:  # no prompt: the interactive chat (a widget in a notebook)
        if args.endpoint is not None:
            return args.presenter.chat(client, args.endpoint, feedback=args.feedback, endpoint=True, token=args.token)
        return args.presenter.chat(client, args.model, feedback=args.feedback)
    live = not args.json and not args.notebook
    if args.endpoint is not None:
        session = client.chats.start(endpoint=args.endpoint, token=args.token)
    else:
        session = client.chats.start(args.model, token=args.token)
    try:

        def show(piece: str) -> None:
            sys.stdout.write(piece)
            sys.stdout.flush()

        turn = session.ask(args.prompt, max_new_tokens=args.max_new_tokens, on_piece=show if live else None)
        turn.wait(600)
    finally:
        client.chats.close(session.id)
    if live:
        sys.stdout.write("\n")
    logged = None
    if args.feedback is not None and (_vote(args) or args.better or args.comment):
        client.feedback.record(
            args.feedback, model=session.model, prompt=turn.prompt, answer=turn.text or "(empty answer)",
            vote=_vote(args), better=args.better, comment=args.comment, answer_id=turn.id, session=session.id,
        )  # fmt: skip
        logged = args.feedback
        if live:
            print(f"feedback recorded in {logged}", file=sys.stderr)
    answer = ChatAnswer(session.model, turn.prompt, turn.text, turn.tokens, turn.seconds, turn.id, logged)
    return None if live else answer


def _align(client: Starverse, args: argparse.Namespace) -> object:
    from jupyter_starverse.errors import BadInputError

    if getattr(args, "recipe", None) is not None or getattr(args, "data", None):
        raise BadInputError("align picks the recipe and the data from the feedback", field="recipe",
                            hint="leave out --recipe/--data; use --method dpo|kto|reward")  # fmt: skip
    if not args.model:
        raise BadInputError("align needs --model hf:ORG/REPO@REV", field="model", hint="the model to align")
    fields = job_fields(args, default_accelerator=client.default_accelerator())
    spec = client.align(
        args.feedback, model=args.model, method=args.method, params=dict(args.param), name=args.name, **fields
    )
    return run_spec(client, args, spec)


def _pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE")
    return key, value


def _vote_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--up", action="store_true", help="thumbs up")
    g.add_argument("--down", action="store_true", help="thumbs down")
    p.add_argument("--better", default=None, metavar="TEXT", help="a better answer")
    p.add_argument("--comment", default=None, metavar="TEXT", help="a comment")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from ._names import FEEDBACK_EXPORT_KINDS as EXPORT_KINDS

    top = sub.add_parser("feedback", help="thumbs up/down on answers: logs, versions, preference pairs and labels")
    cmds = top.add_subparsers(dest="feedback_command", metavar="SUBCOMMAND", parser_class=type(top))
    cmds.required = True

    p = cmds.add_parser("ls", help="feedback logs with their record counts and versions")
    add_json_flag(p)
    p.set_defaults(run=_ls)

    p = cmds.add_parser("add", help="record one judgement of an answer")
    p.add_argument("log", metavar="LOG")
    p.add_argument("--model", required=True, help="the model that answered (hf:ORG/REPO@REV, exp:NAME, ...)")
    p.add_argument("--prompt", required=True)
    p.add_argument("--answer", required=True)
    p.add_argument("--answer-id", default=None, help="the answer's id: a second vote on it replaces the first")
    _vote_flags(p)
    add_json_flag(p)
    p.set_defaults(run=_add)

    p = cmds.add_parser("show", help="the records of a log (LOG) or of a frozen version (LOG@N) as a table")
    p.add_argument("ref", metavar="LOG[@N]")
    add_json_flag(p)
    p.set_defaults(run=_show)

    p = cmds.add_parser("snapshot", help="freeze a log into the next store version LOG@N")
    p.add_argument("log", metavar="LOG")
    add_json_flag(p)
    p.set_defaults(run=_snapshot)

    p = cmds.add_parser("export", help="write preference pairs, labels or the records as JSON lines")
    p.add_argument("ref", metavar="LOG[@N]")
    p.add_argument("--kind", choices=EXPORT_KINDS, default="pairs", help="pairs (DPO), labels (KTO) or records")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="the .jsonl file to write")
    add_json_flag(p)
    p.set_defaults(run=_export)

    p = sub.add_parser("chat", help="ask a model one question (streamed); optionally vote on the answer")
    p.add_argument("model", metavar="MODEL", nargs="?", default=None,
                   help="hf:ORG/REPO@REV, exp:EXPERIMENT or a model folder (or --endpoint)")  # fmt: skip
    p.add_argument("--endpoint", default=None, metavar="ID|URL",
                   help="chat with a served model: an endpoint id (`serve ls`) or http://HOST:PORT/v1")  # fmt: skip
    p.add_argument("--token", default=None, metavar="env:NAME|file:PATH",
                   help="the token of an endpoint URL, by reference (a local endpoint's is read for you)")  # fmt: skip
    p.add_argument(
        "--prompt", default=None, help="answer this one prompt (without it: the interactive chat, in a notebook)"
    )
    p.add_argument("--max-new-tokens", type=int, default=64, metavar="N")
    p.add_argument("--feedback", default=None, metavar="LOG", help="record the vote in this feedback log")
    _vote_flags(p)
    add_json_flag(p)
    p.set_defaults(run=_chat)

    p = sub.add_parser(
        "align",
        help="align a model on a feedback version: DPO (pairs), KTO (labels) or a reward model",
        description="Launch the dpo, kto or reward recipe on the data of a feedback version (a log name is "
        "frozen first), on any backend. `starverse recipes publish JOB --repo ORG/REPO@REV` stores the result.",
    )
    p.add_argument("feedback", metavar="LOG[@N]")
    p.add_argument("--method", choices=("dpo", "kto", "reward"), default="dpo", help="default: dpo")
    p.add_argument("--name", default=None, help="job name (default: the method)")
    add_job_options(p)
    taken = {flag for action in p._actions for flag in action.option_strings}
    if "--model" not in taken:  # the launch options may already carry the recipe's --model/--param
        p.add_argument("--model", default=None, metavar="hf:ORG/REPO", help="the store model to align")
    if "--param" not in taken:
        p.add_argument(
            "--param", action="append", type=_pair, default=[], metavar="NAME=VALUE", help="recipe parameter"
        )
    p.set_defaults(run=_align, script_args=[])
