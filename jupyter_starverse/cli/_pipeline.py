"""``starverse pipeline ...`` (and ``%sv pipeline ...``): check, price, export and run ``.svpipeline`` files.

::

    starverse pipeline validate sft.svpipeline         # issues per node; exit 2 on an error
    starverse pipeline cost sft.svpipeline             # each step and the total
    starverse pipeline export sft.svpipeline --format sbatch -d out/   # submit.sh + one script per step
    starverse pipeline run sft.svpipeline [--backend slurm] [--detach]
    starverse pipeline status RUN_ID | runs | cancel RUN_ID
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._common import add_json_flag

if TYPE_CHECKING:
    from jupyter_starverse.client import Starverse
    from jupyter_starverse.pipelines import Pipeline, PipelineCheck, PipelineRun, StepRun

__all__ = ["register"]


@dataclass(frozen=True)
class PipelineCost:
    """The cost part of a check: each step's estimate and the total."""

    check: PipelineCheck

    def to_json(self) -> dict[str, Any]:
        data = self.check.to_json()
        return {k: data[k] for k in ("name", "costs", "currency", "total_low", "total_high", "total", "unpriced")}

    def __str__(self) -> str:
        lines = [f"pipeline {self.check.name}"]
        for cost in self.check.costs:
            if cost.preview is None:
                lines.append(f"  {cost.node}: {cost.reason}")
                continue
            est = cost.preview.estimate
            lines.append(f"  {cost.node}: {cost.preview}" if est is None else
                         f"  {cost.node}: {est.figure}  ({cost.preview})")  # fmt: skip
        lines.append(f"  total: {self.check.total_text}")
        return "\n".join(lines)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(str(self))


def _check_or_fail(result: PipelineCheck, notebook: bool) -> object:
    from jupyter_starverse.errors import BadInputError

    if notebook or result.ok:
        return result

    def stream() -> Iterator[object]:
        yield result  # printed first, then the error sets the exit code
        errors = [i for i in result.issues if i.level == "error"]
        raise BadInputError(f"pipeline {result.name!r} has {len(errors)} error(s)", field=errors[0].field,
                            hint=errors[0].hint or "fix the nodes named above")  # fmt: skip

    return stream()


def _validate(client: Starverse, args: argparse.Namespace) -> object:
    pipeline, base = client.pipelines.load(args.file)
    return _check_or_fail(client.pipelines.check(pipeline, base_dir=base), args.notebook)


def _cost(client: Starverse, args: argparse.Namespace) -> object:
    pipeline, base = client.pipelines.load(args.file)
    return PipelineCost(client.pipelines.check(pipeline, base_dir=base))


def _export(client: Starverse, args: argparse.Namespace) -> object:
    pipeline, base = client.pipelines.load(args.file)
    result = client.pipelines.export(pipeline, args.format, base_dir=base)
    if args.dir is None:
        return result
    written = result.write(Path(args.dir))
    print(f"wrote {', '.join(written.written)}", file=sys.stderr)
    return written if args.json else None


def _keep_pins(client: Starverse, pipeline: Pipeline, file: str) -> Pipeline:
    """The first run pins each bare dataset / model name to its exact version in the file itself,
    so that the next run (and a colleague's) reads the same data."""
    pinned, made = client.pipelines.pin(pipeline)
    if not made:
        return pipeline
    pins = ", ".join(f"{node} -> {ref}" for node, ref in made.items())
    try:
        Path(file).expanduser().write_text(pinned.dumps(), encoding="utf-8")
    except OSError as e:
        print(f"note: pinned {pins} for this run; {file} is not writable ({e.strerror}): the next run resolves "
              "the names again", file=sys.stderr)  # fmt: skip
        return pinned
    print(f"pinned {pins} in {file} (pick another version in the file to move on)", file=sys.stderr)
    return pinned


def _run(client: Starverse, args: argparse.Namespace) -> object:
    pipeline, base = client.pipelines.load(args.file)
    pipeline = _keep_pins(client, pipeline, args.file)
    if args.detach:
        return client.pipelines.run(pipeline, base_dir=base, wait=False, backend=args.backend)

    def show(node: str, step: StepRun) -> None:
        job = f" {step.backend}:{step.job_id}" if step.job_id else ""
        print(f"{node}: {step.state}{job}" + (f" ({step.reason})" if step.reason else ""), file=sys.stderr)

    run = client.pipelines.run(pipeline, base_dir=base, wait=True, backend=args.backend, on_change=show)
    return _run_or_fail(run, args.notebook)


def _run_or_fail(run: PipelineRun, notebook: bool) -> object:
    from jupyter_starverse.errors import StarverseError

    if notebook or run.state == "succeeded":
        return run

    def stream() -> Iterator[object]:
        yield run
        bad = next((s for s in run.steps if s.state != "succeeded"), None)
        where = f" at step {bad.node}" if bad else ""
        hint = f"`starverse pipeline status {run.run_id}` and `starverse jobs logs JOB_ID`"
        raise StarverseError(f"pipeline run {run.run_id} {run.state}{where}", hint=hint)

    return stream()


def _status(client: Starverse, args: argparse.Namespace) -> object:
    return client.pipelines.status(args.run_id)


def _runs(client: Starverse, args: argparse.Namespace) -> object:
    runs = client.pipelines.runs()
    return runs if args.json else "\n".join(str(r) for r in runs) or "no pipeline runs"


def _cancel(client: Starverse, args: argparse.Namespace) -> object:
    return client.pipelines.cancel(args.run_id)


def _drive(client: Starverse, args: argparse.Namespace) -> object:
    return client.pipelines.drive(args.run_id)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from ._names import BACKENDS
    from ._names import PIPELINE_EXPORT_FORMATS as EXPORT_FORMATS

    p = sub.add_parser("pipeline", help="check, price, export and run .svpipeline files")
    cmds = p.add_subparsers(dest="pipeline_command", metavar="COMMAND")

    def file_cmd(name: str, help_text: str) -> argparse.ArgumentParser:
        c: argparse.ArgumentParser = cmds.add_parser(name, help=help_text)
        c.add_argument("file", metavar="FILE", help="a .svpipeline file")
        add_json_flag(c)
        return c

    file_cmd("validate", "issues of every node (cards, GPU pool, datasets); exit 2 on an error").set_defaults(
        run=_validate
    )
    file_cmd("cost", "each step's estimate and the pipeline's total").set_defaults(run=_cost)
    c = file_cmd("export", "sbatch scripts (+ submit.sh), Kubernetes YAML or a Python script")
    c.add_argument("--format", "-f", choices=EXPORT_FORMATS, default="sbatch", help="what to write (default: sbatch)")
    c.add_argument("--dir", "-d", default=None, metavar="DIR", help="write the files into DIR instead of printing")
    c.set_defaults(run=_export)
    c = file_cmd("run", "run every step as a job after the steps it waits for")
    c.add_argument("--backend", choices=BACKENDS, default=None, help="local, kubernetes or slurm (default: the file's)")
    c.add_argument("--detach", action="store_true", help="return at once; `pipeline status RUN_ID` follows it")
    c.set_defaults(run=_run)
    for name, fn, text in (("status", _status, "every step's state"), ("cancel", _cancel, "cancel a run")):
        c = cmds.add_parser(name, help=text)
        c.add_argument("run_id", metavar="RUN_ID")
        add_json_flag(c)
        c.set_defaults(run=fn)
    c = cmds.add_parser("runs", help="every pipeline run, newest first")
    add_json_flag(c)
    c.set_defaults(run=_runs)
    c = cmds.add_parser("drive", help=argparse.SUPPRESS)  # the detached driver of a run (REST, --detach)
    c.add_argument("run_id", metavar="RUN_ID")
    add_json_flag(c)
    c.set_defaults(run=_drive)
