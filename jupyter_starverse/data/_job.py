"""A whole data step as one job of N ranks, on any backend: ``python -m jupyter_starverse.data._job``.

The sharded path of :class:`~jupyter_starverse.data.DataPrep` (``shards=``) submits the
per-document work as a job and merges in the process that asked. This module is the same
step with the asking process inside the job, so that a scheduler (Slurm, Kubernetes, a
pipeline's ``afterok`` chain) can run it unattended:

* rank 0 runs the step through :class:`DataPrep` (estimate, merge, publish the new version in
  the catalog, the report); where that step would submit its shard job, rank 0 instead hands
  the shard arguments to every rank through the job's run folder (on the shared file system)
  and a barrier, does its own share, and waits at a second barrier for the others;
* every other rank waits for the arguments, does its share (``_shard``), meets rank 0 again.

Its inputs are store references: every rank reads the dataset through the store (shared in
the cluster), so a step may read what an earlier job of the same chain writes; nothing is
mounted at submit time. The step's report is also written to ``data-report.json`` in the run
folder. What runs here imports the catalog and the data service (to publish), never the facade.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_starverse.errors import BadInputError
from jupyter_starverse.jobmodel import JobSpec

if TYPE_CHECKING:
    from jupyter_starverse.catalog import Catalog

__all__ = ["PREP_MODULE", "SHARDED_STEPS", "default_target", "job_command", "job_spec", "main", "parse_shards"]

#: The module every rank runs (``python -m``), in the image or the cluster's environment.
PREP_MODULE = "jupyter_starverse.data._job"
#: The steps whose per-document work is split over ranks (score runs on one rank).
SHARDED_STEPS = ("scan", "clean", "dedup")
_STEPS = (*SHARDED_STEPS, "score")
_HANDOFF = "data-shards.json"
REPORT = "data-report.json"
_MAX_RANKS = 4096


def parse_shards(value: object, *, step: str | None = None) -> tuple[int, int]:
    """``N`` (ranks: N nodes x 1) or ``NxP`` (nodes x processes per node) as ``(nodes, procs)``."""
    hint = "give the ranks as N or NODESxPROCS, e.g. 4 or 2x2"
    if isinstance(value, bool):
        raise BadInputError(f"shards must be a number of ranks, not {value!r}", field="shards", hint=hint)
    if isinstance(value, int):
        nodes, procs = value, 1
    elif isinstance(value, str) and value.strip():
        parts = value.lower().replace(" ", "").split("x")
        if len(parts) > 2 or not all(p.isdigit() for p in parts):
            raise BadInputError(f"shards {value!r} is not N or NxP", field="shards", hint=hint)
        nodes, procs = int(parts[0]), int(parts[1]) if len(parts) == 2 else 1
    else:
        raise BadInputError(f"shards must be N or NxP, not {value!r}", field="shards", hint=hint)
    if nodes < 1 or procs < 1 or nodes * procs > _MAX_RANKS:
        raise BadInputError(f"shards {value!r}: between 1 and {_MAX_RANKS} ranks", field="shards", hint=hint)
    if step is not None and step not in SHARDED_STEPS and nodes * procs > 1:
        raise BadInputError(f"{step} runs on one rank, not {nodes * procs}", field="shards",
                            hint=f"shard {', '.join(SHARDED_STEPS)}; leave shards unset for {step}")  # fmt: skip
    return nodes, procs


def job_command(step: str, source: str, *, to: str | None, options: dict[str, Any] | None = None,
                shards: tuple[int, int] = (1, 1), python: str = "python") -> tuple[str, ...]:  # fmt: skip
    """The command every rank of the job runs (``JobSpec.command``)."""
    if step not in _STEPS:
        raise BadInputError(f"unknown data step {step!r}", field="step", hint=f"steps: {', '.join(_STEPS)}")
    if step == "scan" and to:
        raise BadInputError("scan writes no version", field="to", hint="leave --to unset for scan")
    if step != "scan" and not to:
        raise BadInputError(f"where should the {step} output go?", field="to", hint="pass NAME@VERSION")
    parse_shards(f"{shards[0]}x{shards[1]}", step=step)
    cmd = [python, "-m", PREP_MODULE, step, source, "--shards", f"{shards[0]}x{shards[1]}"]
    if to:
        cmd += ["--to", to]
    if options:
        cmd += ["--options", json.dumps(options, sort_keys=True, ensure_ascii=False)]
    return tuple(cmd)


def job_spec(step: str, source: str, *, to: str | None, options: dict[str, Any] | None = None,
             shards: tuple[int, int] = (1, 1), backend: str = "local", name: str | None = None,
             display_name: str | None = None) -> JobSpec:  # fmt: skip
    """The job that runs ``step`` over ``shards`` ranks on ``backend`` (CPU ranks; rank 0 publishes).

    Slurm and local ranks run this interpreter (a shared install); a pod runs the image's python.
    """
    from jupyter_starverse.jobmodel._spec import STORE_REPORTS, job_name_of

    python = "python" if backend == "kubernetes" else sys.executable
    command = job_command(step, source, to=to, options=options, shards=shards, python=python)
    return JobSpec(
        name=name or job_name_of(f"data-{step}-{source.split('@')[0]}"),
        display_name=display_name or f"data {step} {source}" + (f" -> {to}" if to else ""),
        command=command,
        nodes=shards[0],
        procs_per_node=shards[1],
        accelerator="cpu",
        # what rank 0 adds to the store (the report, the new version): the store is writable for it
        store_writes=(STORE_REPORTS, to) if to else (STORE_REPORTS,),
    )


def default_target(catalog: Catalog, step: str, source: str, to: str | None) -> str | None:
    """What a step as a job writes: ``to``, or ``NAME@VERSION-STEP`` as the step in-process would;
    refused before anything is submitted when the version exists (a step never overwrites one)."""
    from jupyter_starverse.catalog import DatasetRef, parse_ref
    from jupyter_starverse.errors import ConflictError, NotFoundError

    if step == "scan":
        return None
    if not to:
        entry = catalog.entry(source)  # NotFound with its hint for a name that is no dataset
        to = f"{entry.name}@{entry.version}-{step}"
    ref = parse_ref(to)
    if not isinstance(ref, DatasetRef) or not ref.version:
        raise BadInputError(f"{to!r} is not NAME@VERSION", field="to", hint="e.g. corpus@clean")
    try:
        catalog.entry(to)
    except NotFoundError:
        return to
    raise ConflictError(f"{to} already exists; a step never overwrites a dataset version",
                        hint="pass --to NAME@ANOTHER-VERSION, or remove it with `starverse store rm`")  # fmt: skip


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _use_mounts(mounts: dict[str, str]) -> None:
    """Point this rank's ``runtime.mount_path`` at the store folders rank 0 resolved."""
    from jupyter_starverse import runtime

    os.environ["STARVERSE_MOUNTS"] = json.dumps(mounts)
    runtime.job_env.cache_clear()


def _shard(args: Sequence[str], mounts: dict[str, str]) -> None:
    from . import _shard

    _use_mounts(mounts)
    _shard.main(list(args))


def main(argv: Sequence[str] | None = None) -> int:
    """The entry point of every rank (its arguments are :func:`job_command`'s)."""
    parser = argparse.ArgumentParser(prog="python -m " + PREP_MODULE, description="a data step as a job")
    parser.add_argument("step", choices=_STEPS)
    parser.add_argument("source")
    parser.add_argument("--to")
    parser.add_argument("--shards", default="1x1")
    parser.add_argument("--options", default="{}")
    args = parser.parse_args(sys.argv[1:] if argv is None else list(argv))

    from jupyter_starverse import runtime

    runtime.job_env.cache_clear()  # read this process's environment as it is now
    env = runtime.job_env()
    rank, world = env.rank, env.world_size
    run_dir = env.run_dir or Path.cwd()  # the run folder: on a file system every rank sees
    handoff = run_dir / _HANDOFF
    if world > 1:
        if args.step not in SHARDED_STEPS:
            raise SystemExit(f"starverse: {args.step} runs on one rank, this job has {world}")
        runtime.init()  # the process group, for the two barriers
    if rank != 0:
        runtime.barrier()  # rank 0 wrote the shard arguments (or failed, and the group with it)
        job = json.loads(handoff.read_text(encoding="utf-8"))
        _shard(job["args"], job["mounts"])
        runtime.barrier()
        print(f"rank {rank}/{world}: {args.step} share done", flush=True)
        return 0
    from jupyter_starverse.errors import StarverseError

    try:
        return _rank0(args, world, run_dir, handoff)
    except StarverseError as e:  # the step's own words, not a traceback, in the job's log
        print(f"starverse: {args.step} failed: {e.message}" + (f" ({e.hint})" if e.hint else ""),
              file=sys.stderr, flush=True)  # fmt: skip
        return 1


def _rank0(args: argparse.Namespace, world: int, run_dir: Path, handoff: Path) -> int:
    from jupyter_starverse import runtime
    from jupyter_starverse._settings import Settings
    from jupyter_starverse.catalog import Catalog
    from jupyter_starverse.jobmodel import Job, JobState

    from ._service import DataPrep

    settings = Settings.from_env()
    catalog = Catalog(settings)
    options = json.loads(args.options)
    if not isinstance(options, dict):
        raise SystemExit("starverse: --options is a JSON object")
    nodes, procs = parse_shards(args.shards, step=args.step)
    if nodes * procs != world:
        print(f"starverse: asked for {nodes}x{procs} ranks, the job has {world}: using {world}", flush=True)
        nodes, procs = world, 1
    env = runtime.job_env()

    def submit(spec: JobSpec) -> Job:
        """Where DataPrep would submit its shard job: every rank of this job does its share."""
        mounts = {m: str(catalog.mount(m)) for m in spec.mounts}
        _write_atomic(handoff, json.dumps({"args": list(spec.args), "mounts": mounts}))
        runtime.barrier()
        started = time.time()
        _shard(spec.args, mounts)
        runtime.barrier()
        return Job(env.job_id or "local", "job", spec, JobState.SUCCEEDED, str(run_dir), started, started, time.time())

    prep = DataPrep(settings, catalog, submit=submit, wait=lambda job, timeout: job)
    kwargs: dict[str, Any] = dict(options)
    if world > 1:
        kwargs["shards"] = (nodes, procs)
    if args.step != "scan":
        kwargs["to"] = args.to
    report = getattr(prep, args.step)(args.source, say=lambda text: print(text, flush=True), **kwargs)
    if not report.ranks:  # one rank ran the whole step here: its figure
        import dataclasses
        import resource

        peak = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        stage = {"stage": args.step, "wall_s": round(report.elapsed_s, 3), "peak_rss_mib": peak}
        report = dataclasses.replace(report, ranks=({"rank": 0, "docs": report.docs_in, "stages": [stage]},))
    _write_atomic(run_dir / REPORT, json.dumps(report.to_json(), ensure_ascii=False))
    print(f"starverse: {args.step} of {args.source}: {report.docs_out} of {report.docs_in} documents"
          + (f" -> {report.output}" if report.output else "") + f", report {report.id}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
