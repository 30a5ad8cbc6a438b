"""``starverse data ...`` (and ``%sv data ...``): private data in, clean data out.

| command                                                        | returns                 |
|----------------------------------------------------------------|-------------------------|
| data scan SOURCE [--types T,..] [--text-field F]               | DataReport (no version) |
| data clean SOURCE [--action TYPE=ACTION].. [--salt env:V] [--to NAME@V] | DataReport     |
| data dedup SOURCE [--threshold 0.7] [--semantic hf:ORG/REPO] [--max-memory 256M] | DataReport |
| data scan/clean/dedup ... --shards 2x2 (a job of 2 nodes x 2 processes) | DataReport |
| data score SOURCE [--min-quality 0.5] [--lm hf:..] [--example TEXT].. | DataReport       |
| data estimate STEP SOURCE                                      | StepEstimate            |
| data reports                                                   | ReportList              |
| data report ID [--html FILE]                                   | DataReport              |

SOURCE is a store dataset ``NAME[@VERSION]`` (pulled first when needed), a folder or an fsspec
URL (then ``--to`` names the output). Every step but ``scan`` writes a new version (default
``NAME@VERSION-STEP``); the estimate is printed on stderr before a step starts.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ._common import StatusLine, add_json_flag
from ._store import parse_size

if TYPE_CHECKING:
    from jupyter_starverse.client import Starverse
    from jupyter_starverse.data import (
        DataReport,
        Progress,
        ReportList,
        StepEstimate,
        StepProgress,
    )

__all__ = ["register"]


def _say(args: argparse.Namespace) -> tuple[Callable[[str], None], Progress, Callable[[], None]]:
    """Progress on stderr: the estimate as its own line, then a status line with a bar and the ETA."""
    status = StatusLine()
    barred = False

    def say(text: str) -> None:
        if text.startswith("estimate") or "wrote" in text:
            print(text, file=sys.stderr, flush=True)
        elif not barred:  # the bar says more than "N documents"
            status.update(text)

    shown: tuple[str, int, int] = ("", 0, -1)

    def progress(p: StepProgress) -> None:
        nonlocal barred, shown
        if p.phase in ("estimating", "done"):  # the estimate and "wrote ..." are lines of their own
            return
        barred = barred or p.phase == "reading"
        tenth = (p.phase, p.pass_no, int((p.fraction or 0) * 10))
        if status.tty or tenth != shown:  # a pipe or a cell gets a line per tenth, a terminal the live bar
            shown = tenth
            status.update(str(p))

    return say, progress, status.close


def _actions(pairs: list[str] | None) -> dict[str, str]:
    from jupyter_starverse.errors import BadInputError

    out: dict[str, str] = {}
    for pair in pairs or ():
        kind, sep, action = pair.partition("=")
        if not sep:
            raise BadInputError(
                f"--action {pair!r} is not TYPE=ACTION", field="action", hint="e.g. --action person=placeholder"
            )
        out[kind.strip()] = action.strip()
    return out


def _types(text: str | None) -> list[str] | None:
    return [t.strip() for t in text.split(",") if t.strip()] if text else None


def _examples(args: argparse.Namespace) -> list[str]:
    from jupyter_starverse.errors import BadInputError

    texts = list(args.example or ())
    if args.examples_file:
        path = Path(args.examples_file).expanduser()
        if not path.is_file():
            raise BadInputError(f"no file {path}", field="examples_file", hint="one example text per line")
        texts += [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return texts


def _step(client: Starverse, args: argparse.Namespace) -> object:
    """The step here (``client.data``), or with ``--backend`` the whole step as a job there (``client.data_job``).

    Its options are the step table's (:data:`_STEPS`): each option from its flag, in the table's order.
    """
    from jupyter_starverse.errors import BadInputError

    opts = {name: (get(args) if callable(get) else getattr(args, get)) for name, get in _STEPS[args.step].options}
    run: Callable[..., DataReport] = getattr(client.data, args.step)

    if args.backend:
        if args.estimate:
            raise BadInputError(
                "--estimate runs here; drop --backend", field="backend", hint="estimate first, then submit"
            )
        job_opts = {k: list(v) if isinstance(v, tuple) else v for k, v in opts.items()}  # JSON for the job
        return client.data_job(args.step, args.source, to=getattr(args, "to", None), options=job_opts,
                               shards=args.shards or (1, 1), backend=args.backend)  # fmt: skip
    if args.estimate:
        return client.data.estimate(args.step, args.source, text_field=args.text_field)
    extra: dict[str, Any] = {"to": args.to} if hasattr(args, "to") else {}
    if hasattr(args, "shards"):
        extra["shards"] = args.shards
    say, progress, close = _say(args)
    try:
        return run(args.source, **opts, **extra, say=say, progress=progress)
    finally:
        close()


def _estimate(client: Starverse, args: argparse.Namespace) -> StepEstimate:
    return client.data.estimate(args.step_name, args.source, text_field=args.text_field)


def _reports(client: Starverse, args: argparse.Namespace) -> ReportList:
    return client.data.reports()


def _report(client: Starverse, args: argparse.Namespace) -> object:
    report = client.data.report(args.id)
    if args.html:
        path = Path(args.html).expanduser()
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(client.data.report_html(args.id), encoding="utf-8")
        tmp.replace(path)
        return f"wrote {path}"
    return report


def _shards(text: str) -> tuple[int, int]:
    """``N`` or ``NxP``, read by the core's parser (the REST routes and pipeline nodes use it too)."""
    from jupyter_starverse.data import parse_shards
    from jupyter_starverse.errors import BadInputError

    try:
        return parse_shards(text)
    except BadInputError as e:
        raise argparse.ArgumentTypeError(f"{e.message} ({e.hint})" if e.hint else e.message) from None


def _unit(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    return value


def _add_shards(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--shards",
        type=_shards,
        default=None,
        metavar="NODESxPROCS",
        help="run the per-document work as a job of NODES x PROCS ranks (e.g. 2x2), merged in order",
    )


class _StepCommand(NamedTuple):
    """One data step's command: its help, whether it writes a version or shards, its flags and options.

    ``flags`` are ``(names, argparse keywords)`` added after the common ones (SOURCE,
    ``--text-field``, ``--to``, ``--estimate``, ``--backend``, ``--json``); ``options`` map each
    keyword of ``client.data.STEP`` to a flag's attribute, or to a function of the parsed flags.
    """

    help: str
    output: bool
    shards: bool
    flags: tuple[tuple[tuple[str, ...], dict[str, Any]], ...]
    options: tuple[tuple[str, str | Callable[[argparse.Namespace], Any]], ...]


def _examples_flag(what: str) -> tuple[tuple[str, ...], dict[str, Any]]:
    return ("--examples",), {"type": int, "default": 3, "help": f"{what} per type (default 3)"}


def _step_table() -> dict[str, _StepCommand]:
    """The step table: every ``data STEP`` command is generated from it (:func:`register`)."""
    from ._names import PII_ACTIONS as ACTIONS
    from ._names import PII_TYPES

    return {
        "scan": _StepCommand(
            "count sensitive fields per type, with masked examples and a suggested action",
            output=False,
            shards=True,
            flags=(
                (("--types",), {"default": None, "help": f"comma-separated subset of {','.join(PII_TYPES)}"}),
                _examples_flag("masked examples"),
            ),
            options=(("text_field", "text_field"), ("types", lambda a: _types(a.types)), ("examples", "examples")),
        ),
        "clean": _StepCommand(
            "de-identify: apply an action per sensitive type into a new version",
            output=True,
            shards=True,
            flags=(
                (
                    ("--action",),
                    {
                        "action": "append",
                        "metavar": "TYPE=ACTION",
                        "help": f"override a suggested action; actions: {', '.join(ACTIONS)} (repeatable)",
                    },
                ),
                (
                    ("--salt",),
                    {"default": None, "metavar": "env:VAR|file:PATH", "help": "secret for pseudonyms, by reference"},
                ),
                _examples_flag("before/after examples"),
            ),
            options=(
                ("actions", lambda a: _actions(a.action)),
                ("salt", "salt"),
                ("text_field", "text_field"),
                ("examples", "examples"),
            ),
        ),
        "dedup": _StepCommand(
            "exact, MinHash near, paragraph and semantic duplicates into a new version",
            output=True,
            shards=True,
            flags=(
                (
                    ("--threshold",),
                    {"type": _unit, "default": 0.7, "help": "Jaccard at which a near duplicate is removed"},
                ),
                (
                    ("--lsh-threshold",),
                    {"type": _unit, "default": 0.5, "help": "LSH candidate threshold (default 0.5)"},
                ),
                (("--num-perm",), {"type": int, "default": 128}),
                (("--ngram",), {"type": int, "default": 5, "help": "character shingle length (default 5)"}),
                (
                    ("--paragraph-share",),
                    {
                        "type": _unit,
                        "default": 0.15,
                        "help": "remove a document when more than "
                        "this share of its characters are paragraphs an earlier one has",
                    },
                ),
                (
                    ("--boilerplate-docs",),
                    {
                        "type": int,
                        "default": 4,
                        "help": "a paragraph in this many documents is "
                        "boilerplate: stripped, never a reason to remove (default 4)",
                    },
                ),
                (
                    ("--against",),
                    {
                        "default": None,
                        "metavar": "NAME@VERSION",
                        "help": "a version an earlier dedup "
                        "wrote: remove from SOURCE what duplicates it, write the union",
                    },
                ),
                (
                    ("--semantic-clusters",),
                    {"type": int, "default": 0, "help": "k-means clusters (default ~1 per 1,000 docs)"},
                ),
                (("--no-paragraph",), {"action": "store_true", "help": "skip the paragraph rule"}),
                (
                    ("--semantic",),
                    {
                        "default": None,
                        "metavar": "hf:ORG/REPO",
                        "help": "embedding model for semantic "
                        "dedup: a transformer, or a static model (data.distill_static)",
                    },
                ),
                (
                    ("--semantic-threshold",),
                    {
                        "type": _unit,
                        "default": None,
                        "help": "cosine similarity (default per encoder: 0.96 static, 0.95 transformer)",
                    },
                ),
                (("--max-memory",), {"default": "256M", "help": "memory for band tables; the rest spills to disk"}),
            ),
            options=(
                ("threshold", "threshold"),
                ("lsh_threshold", "lsh_threshold"),
                ("num_perm", "num_perm"),
                ("ngram", "ngram"),
                ("paragraph_share", lambda a: None if a.no_paragraph else a.paragraph_share),
                ("semantic_model", "semantic"),
                ("semantic_threshold", "semantic_threshold"),
                ("max_memory", lambda a: parse_size(a.max_memory)),
                ("text_field", "text_field"),
                ("against", "against"),
                ("boilerplate_docs", "boilerplate_docs"),
                ("semantic_clusters", "semantic_clusters"),
            ),
        ),
        "score": _StepCommand(
            "quality, perplexity and domain relevance; remove past thresholds",
            output=True,
            shards=False,
            flags=(
                (
                    ("--min-quality",),
                    {"type": float, "default": 0.5, "help": "remove below this heuristic score (-1: keep all)"},
                ),
                (("--lm",), {"default": None, "metavar": "hf:ORG/REPO", "help": "language model for perplexity"}),
                (("--max-perplexity",), {"type": float, "default": None}),
                (("--encoder",), {"default": None, "metavar": "hf:ORG/REPO", "help": "embedding model for relevance"}),
                (
                    ("--example",),
                    {"action": "append", "metavar": "TEXT", "help": "an in-domain example text (repeatable)"},
                ),
                (
                    ("--examples-file",),
                    {"default": None, "metavar": "FILE", "help": "in-domain examples, one per line"},
                ),
                (("--min-relevance",), {"type": float, "default": None}),
            ),
            options=(
                ("min_quality", lambda a: None if a.min_quality < 0 else a.min_quality),
                ("lm", "lm"),
                ("max_perplexity", "max_perplexity"),
                ("encoder", "encoder"),
                ("examples", _examples),
                ("min_relevance", "min_relevance"),
                ("text_field", "text_field"),
            ),
        ),
    }


_STEPS: dict[str, _StepCommand] = {}


def _common(p: argparse.ArgumentParser, step: str, *, output: bool = True) -> None:
    p.add_argument("source", metavar="SOURCE", help="store dataset NAME[@VERSION], a folder or an fsspec URL")
    p.add_argument("--text-field", default="text", help="the field/column holding the text (default: text)")
    if output:
        p.add_argument("--to", default=None, metavar="NAME[@VERSION]", help=f"output version (default NAME@V-{step})")
    p.add_argument("--estimate", action="store_true", help="only print the time and memory estimate")
    p.add_argument("--backend", default=None, choices=("local", "slurm", "kubernetes"),
                   help="run the whole step as a job there (with --shards: its ranks); prints the job")  # fmt: skip
    add_json_flag(p)
    p.set_defaults(step=step)


def _verb(
    verbs: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    help: str,
    run: Callable[..., object],
    *flags: tuple[tuple[str, ...], dict[str, Any]],
) -> argparse.ArgumentParser:
    """A verb with its flags, ``--json`` and what it runs."""
    p = verbs.add_parser(name, help=help)
    for names, kw in flags:
        p.add_argument(*names, **kw)
    add_json_flag(p)
    p.set_defaults(run=run)
    return p


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from ._names import DATA_STEPS as STEPS

    data = sub.add_parser("data", help="data preparation: sensitive fields, dedup, quality, as new dataset versions")
    verbs = data.add_subparsers(dest="data_command", metavar="VERB", parser_class=type(data))

    _STEPS.update(_step_table())
    for step, cmd in _STEPS.items():
        p = verbs.add_parser(step, help=cmd.help)
        _common(p, step, output=cmd.output)
        for names, kw in cmd.flags:
            p.add_argument(*names, **kw)
        if cmd.shards:
            _add_shards(p)
        p.set_defaults(run=_step)

    _verb(verbs, "estimate", "time and memory a step would need, from a timed sample", _estimate,
          (("step_name",), {"metavar": "STEP", "choices": STEPS}), (("source",), {"metavar": "SOURCE"}),
          (("--text-field",), {"default": "text"}))  # fmt: skip
    _verb(verbs, "reports", "list the reports of data steps", _reports)
    _verb(verbs, "report", "one report (counts, clusters, histograms); --html writes the page", _report,
          (("id",), {"metavar": "ID"}),
          (("--html",), {"default": None, "metavar": "FILE", "help": "write the HTML report to FILE"}))  # fmt: skip
