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
from typing import TYPE_CHECKING, Any

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


def _run_step(client: Starverse, args: argparse.Namespace, call: Callable[..., DataReport]) -> object:
    if args.estimate:
        return client.data.estimate(args.step, args.source, text_field=args.text_field)
    say, progress, close = _say(args)
    try:
        return call(say=say, progress=progress)
    finally:
        close()


def _scan(client: Starverse, args: argparse.Namespace) -> object:
    opts = {"text_field": args.text_field, "types": _types(args.types), "examples": args.examples}
    return _step(client, args, opts, client.data.scan)


def _clean(client: Starverse, args: argparse.Namespace) -> object:
    opts = {"actions": _actions(args.action), "salt": args.salt, "text_field": args.text_field,
            "examples": args.examples}  # fmt: skip
    return _step(client, args, opts, client.data.clean)


def _dedup(client: Starverse, args: argparse.Namespace) -> object:
    return _step(
        client,
        args,
        dict(
            threshold=args.threshold,
            lsh_threshold=args.lsh_threshold,
            num_perm=args.num_perm,
            ngram=args.ngram,
            paragraph_share=None if args.no_paragraph else args.paragraph_share,
            semantic_model=args.semantic,
            semantic_threshold=args.semantic_threshold,
            max_memory=parse_size(args.max_memory),
            text_field=args.text_field,
            against=args.against,
            boilerplate_docs=args.boilerplate_docs,
            semantic_clusters=args.semantic_clusters,
        ),
        client.data.dedup,
    )


def _score(client: Starverse, args: argparse.Namespace) -> object:
    return _step(
        client,
        args,
        dict(
            min_quality=None if args.min_quality < 0 else args.min_quality,
            lm=args.lm,
            max_perplexity=args.max_perplexity,
            encoder=args.encoder,
            examples=_examples(args),
            min_relevance=args.min_relevance,
            text_field=args.text_field,
        ),
        client.data.score,
    )


def _step(client: Starverse, args: argparse.Namespace, opts: dict[str, Any], run: Callable[..., DataReport]) -> object:
    """The step here (``client.data``), or with ``--backend`` the whole step as a job there (``client.data_job``)."""
    from jupyter_starverse.errors import BadInputError

    if args.backend:
        if args.estimate:
            raise BadInputError(
                "--estimate runs here; drop --backend", field="backend", hint="estimate first, then submit"
            )
        job_opts = {k: list(v) if isinstance(v, tuple) else v for k, v in opts.items()}  # JSON for the job
        return client.data_job(args.step, args.source, to=getattr(args, "to", None), options=job_opts,
                               shards=args.shards or (1, 1), backend=args.backend)  # fmt: skip
    extra: dict[str, Any] = {"to": args.to} if hasattr(args, "to") else {}
    if hasattr(args, "shards"):
        extra["shards"] = args.shards
    return _run_step(client, args, lambda say, progress: run(args.source, **opts, **extra, say=say, progress=progress))


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


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from ._names import DATA_STEPS as STEPS
    from ._names import PII_ACTIONS as ACTIONS
    from ._names import PII_TYPES

    data = sub.add_parser("data", help="data preparation: sensitive fields, dedup, quality, as new dataset versions")
    verbs = data.add_subparsers(dest="data_command", metavar="VERB", parser_class=type(data))

    p = verbs.add_parser("scan", help="count sensitive fields per type, with masked examples and a suggested action")
    _common(p, "scan", output=False)
    p.add_argument("--types", default=None, help=f"comma-separated subset of {','.join(PII_TYPES)}")
    p.add_argument("--examples", type=int, default=3, help="masked examples per type (default 3)")
    _add_shards(p)
    p.set_defaults(run=_scan)

    p = verbs.add_parser("clean", help="de-identify: apply an action per sensitive type into a new version")
    _common(p, "clean")
    p.add_argument(
        "--action",
        action="append",
        metavar="TYPE=ACTION",
        help=f"override a suggested action; actions: {', '.join(ACTIONS)} (repeatable)",
    )
    p.add_argument("--salt", default=None, metavar="env:VAR|file:PATH", help="secret for pseudonyms, by reference")
    p.add_argument("--examples", type=int, default=3, help="before/after examples per type (default 3)")
    _add_shards(p)
    p.set_defaults(run=_clean)

    p = verbs.add_parser("dedup", help="exact, MinHash near, paragraph and semantic duplicates into a new version")
    _common(p, "dedup")
    p.add_argument("--threshold", type=_unit, default=0.7, help="Jaccard at which a near duplicate is removed")
    p.add_argument("--lsh-threshold", type=_unit, default=0.5, help="LSH candidate threshold (default 0.5)")
    p.add_argument("--num-perm", type=int, default=128)
    p.add_argument("--ngram", type=int, default=5, help="character shingle length (default 5)")
    p.add_argument(
        "--paragraph-share",
        type=_unit,
        default=0.15,
        help="remove a document when more than this share of its characters are paragraphs an earlier one has",
    )
    p.add_argument(
        "--boilerplate-docs",
        type=int,
        default=4,
        help="a paragraph in this many documents is boilerplate: stripped, never a reason to remove (default 4)",
    )
    p.add_argument(
        "--against",
        default=None,
        metavar="NAME@VERSION",
        help="a version an earlier dedup wrote: remove from SOURCE what duplicates it, write the union",
    )
    p.add_argument("--semantic-clusters", type=int, default=0, help="k-means clusters (default ~1 per 1,000 docs)")
    p.add_argument("--no-paragraph", action="store_true", help="skip the paragraph rule")
    p.add_argument(
        "--semantic",
        default=None,
        metavar="hf:ORG/REPO",
        help="embedding model for semantic dedup: a transformer, or a static model (data.distill_static)",
    )
    p.add_argument("--semantic-threshold", type=_unit, default=0.95, help="cosine similarity (default 0.95)")
    p.add_argument("--max-memory", default="256M", help="memory for band tables; the rest spills to disk")
    _add_shards(p)
    p.set_defaults(run=_dedup)

    p = verbs.add_parser("score", help="quality, perplexity and domain relevance; remove past thresholds")
    _common(p, "score")
    p.add_argument("--min-quality", type=float, default=0.5, help="remove below this heuristic score (-1: keep all)")
    p.add_argument("--lm", default=None, metavar="hf:ORG/REPO", help="language model for perplexity")
    p.add_argument("--max-perplexity", type=float, default=None)
    p.add_argument("--encoder", default=None, metavar="hf:ORG/REPO", help="embedding model for relevance")
    p.add_argument("--example", action="append", metavar="TEXT", help="an in-domain example text (repeatable)")
    p.add_argument("--examples-file", default=None, metavar="FILE", help="in-domain examples, one per line")
    p.add_argument("--min-relevance", type=float, default=None)
    p.set_defaults(run=_score)

    p = verbs.add_parser("estimate", help="time and memory a step would need, from a timed sample")
    p.add_argument("step_name", metavar="STEP", choices=STEPS)
    p.add_argument("source", metavar="SOURCE")
    p.add_argument("--text-field", default="text")
    add_json_flag(p)
    p.set_defaults(run=_estimate)

    p = verbs.add_parser("reports", help="list the reports of data steps")
    add_json_flag(p)
    p.set_defaults(run=_reports)

    p = verbs.add_parser("report", help="one report (counts, clusters, histograms); --html writes the page")
    p.add_argument("id", metavar="ID")
    p.add_argument("--html", default=None, metavar="FILE", help="write the HTML report to FILE")
    add_json_flag(p)
    p.set_defaults(run=_report)
