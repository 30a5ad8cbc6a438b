"""``starverse eval MODEL --data DATASET[@VERSION]`` (and ``%sv eval``): score models on labelled data.

- ``eval MODEL --data D [--baseline M2 ...]``: the models on the same examples, side by side with
  deltas; ``--errors`` lists the examples MODEL got wrong; ``--backend B --job`` runs it as a job
  (``--dry-run`` shows the job).
- ``eval MODEL --data D --harness`` runs the task through lm-evaluation-harness (a YAML task over
  the same examples), ``eval MODEL --harness-task TASK.yaml`` a team's own lm-eval task over local
  files; the reports are the same records (``eval ls/show/compare``).
- ``eval compare --data D M1 M2 ...``: the chain (base -> CPT -> SFT -> DPO -> INT4) from the
  stored reports, each model against the one before.
- ``eval ls [--model M] [--data D]``, ``eval show ID [--errors]``: the stored reports.
- ``eval curve JOB --reference RECIPE``: the run's loss against the reproduction's reference curve.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from ._common import add_json_flag

if TYPE_CHECKING:
    from jupyter_starverse.client import Starverse
    from jupyter_starverse.evals import TaskOptions

__all__ = ["register"]

_VERBS = ("compare", "ls", "show", "curve")


class ReportList(list):  # type: ignore[type-arg]
    """Reports as lines (text) and a table (notebook)."""

    def __str__(self) -> str:
        return "\n".join(f"{r.model}  {r.line()}" for r in self) or "no evaluation reports"

    def _repr_pretty_(self, p: object, cycle: bool) -> None:
        p.text(str(self))  # type: ignore[attr-defined]


def _options(args: argparse.Namespace) -> TaskOptions:
    from jupyter_starverse.evals import TaskOptions

    labels = tuple(x.strip() for x in args.labels.split(",") if x.strip()) if args.labels else ()
    return TaskOptions(
        task=args.task,
        prompt=args.prompt,
        labels=labels,
        max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size,
    )


def _eval(client: Starverse, args: argparse.Namespace) -> object:
    from jupyter_starverse.errors import BadInputError

    words = list(args.words)
    if args.data:  # models given after --data D belong to the words
        args.data, words = args.data[0], words + list(args.data[1:])
    if not words:
        raise BadInputError(
            "name the model", field="model", hint="starverse eval hf:ORG/REPO@REV --data NAME[@VERSION]"
        )
    verb = words[0] if words[0] in _VERBS else None
    if verb == "ls":
        return ReportList(client.evals.reports(model=args.model_filter, data=args.data))
    if verb == "show":
        if len(words) != 2:
            raise BadInputError("eval show takes one report id", field="id", hint="see `starverse eval ls`")
        report = client.evals.report(words[1])
        return report.wrong(limit=args.max_errors) if args.errors else report
    if verb == "curve":
        if len(words) != 2 or not args.reference:
            raise BadInputError("eval curve takes one JOB (or run folder) and --reference", field="reference",
                                hint="starverse eval curve JOB_ID --reference cogvlm-stage1")  # fmt: skip
        folder = Path(words[1]) if Path(words[1]).is_dir() else Path(client.attach(words[1]).experiment_dir)
        return client.evals.curve(folder, args.reference, tolerance=args.tolerance)
    if not args.data and not (args.harness_task and verb is None):
        raise BadInputError("name the labelled dataset", field="data", hint="--data NAME[@VERSION]")
    if verb == "compare":
        return client.evals.compare(args.data, words[1:])
    if len(words) != 1:
        raise BadInputError(
            "eval takes one MODEL (more models: --baseline M2, or `eval compare --data D M1 M2 ...`)",
            field="model",
            hint="starverse eval hf:ORG/REPO@REV --data NAME[@VERSION] --baseline hf:ORG/BASE",
        )
    kw = dict(
        baselines=tuple(args.baseline),
        task=args.task,
        input_field=args.input_field,
        target_field=args.target_field,
        options=_options(args),
        limit=args.limit,
        harness=args.harness,
        harness_task=args.harness_task,
    )
    if args.job or args.dry_run:
        spec = client.evals.job_spec(words[0], args.data or "", **kw)
        backend = client.backend(args.backend)
        return client.preview(spec, backend=backend) if args.dry_run else client.launch(spec, backend=backend)
    status = args.presenter.status()
    try:
        run = client.evals.evaluate(words[0], args.data or "", progress=lambda p: status.update(str(p)), **kw)
    finally:
        status.close()
    return run.report.wrong(limit=args.max_errors) if args.errors else run


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from ._names import EVAL_TASKS as TASKS

    p = sub.add_parser(
        "eval",
        help="score models on a labelled dataset (baselines side by side), compare a chain, list reports",
        description="eval MODEL --data D [--baseline M2] | eval compare --data D M1 M2 ... | eval ls | eval show ID. "
        "MODEL: hf:ORG/REPO@REV (a store model or an exported ONNX version), exp:EXPERIMENT or a folder.",
    )
    p.add_argument("words", nargs="*", metavar="MODEL | compare M1 M2 ... | ls | show ID | curve JOB")
    # nargs="+": `eval compare --data D M1 M2` (argparse takes no positional after an option's value)
    p.add_argument("--data", nargs="+", default=None, metavar="DATASET[@VERSION]", help="the labelled store dataset")
    p.add_argument(
        "--baseline", action="append", default=[], metavar="MODEL2", help="score this model too (repeatable)"
    )
    p.add_argument("--task", choices=TASKS, default="classification", help="default: classification")
    p.add_argument("--input-field", default="input", help="field of the input text (default: input)")
    p.add_argument("--target-field", default="target", help="field of the expected answer (default: target)")
    p.add_argument(
        "--labels", default=None, metavar="A,B,...", help="classification: the labels (default: every target)"
    )
    p.add_argument("--prompt", default="{input}", help="template of the model input (default: {input})")
    p.add_argument("--batch-size", type=int, default=8, metavar="N", help="examples per forward pass (default 8)")
    p.add_argument("--max-new-tokens", type=int, default=32, metavar="N", help="generated tokens (default 32)")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="only the first N examples")
    p.add_argument("--errors", action="store_true", help="list the examples MODEL got wrong")
    p.add_argument("--max-errors", type=int, default=50, metavar="N", help="with --errors: at most N (default 50)")
    p.add_argument("--model", dest="model_filter", default=None, help="eval ls: only this model's reports")
    h = p.add_argument_group("standard tasks through lm-evaluation-harness (pip install 'jupyter_starverse[harness]')")
    h.add_argument(
        "--harness",
        action="store_true",
        help="run --task over --data through lm-eval (a YAML task over the same examples; its metrics beside ours)",
    )
    h.add_argument(
        "--harness-task",
        default=None,
        metavar="TASK.yaml",
        help="a team's own lm-eval task YAML over local files (instead of --data; nothing is fetched)",
    )
    c = p.add_argument_group("eval curve JOB: the run's loss against a reproduction's reference curve")
    c.add_argument("--reference", default=None, metavar="RECIPE|FILE", help="e.g. cogvlm-stage1 (recipes/curves)")
    c.add_argument("--tolerance", type=float, default=None, help="relative gap that warns (default: the curve's)")
    g = p.add_argument_group("as a job")
    g.add_argument("--job", action="store_true", help="run as a job on --backend")
    g.add_argument("--backend", default=None, help="backend of the job (default: settings)")
    g.add_argument("--dry-run", action="store_true", help="show the job; start nothing")
    add_json_flag(p)
    p.set_defaults(run=_eval)
