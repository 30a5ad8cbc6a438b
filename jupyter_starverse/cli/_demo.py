"""``starverse demo``: the main job on the embedded default, end to end, in about a minute.

Creates a small text dataset in the store through the catalog, mounts it, trains a small
transformer LM on 2 local nodes x 2 processes with the ``ddp`` template, streams the
progress, and prints the loss falling and the experiment folder.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._common import add_json_flag, tracking

if TYPE_CHECKING:
    from jupyter_starverse.client import Starverse
    from jupyter_starverse.experiments import MetricPoint
    from jupyter_starverse.jobmodel import Job, LaunchBackend

__all__ = ["DEMO_DATASET", "DemoEvent", "make_demo_text", "register"]

DEMO_DATASET = "demo-text"

_WORDS = (
    "the model reads the text and learns which letter comes next. "
    "four ranks on two nodes share the work and average their gradients. "
    "a checkpoint is written every few steps so a restart loses little. "
    "the loss falls as the model learns the words. "
)


def make_demo_text(folder: Path) -> Path:
    """Write the demo corpus (a few KB of plain text) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(4):
        target = folder / f"part-{i}.txt"
        if not target.exists():
            target.write_text(_WORDS * 12)
    return folder


@dataclass(frozen=True)
class DemoEvent:
    """One line of the demo's progress (``kind``: phase, dataset, submitted, step, done)."""

    kind: str
    message: str
    data: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, **self.data}

    def __str__(self) -> str:
        return self.message


def _phase(kind: str, message: str, **data: Any) -> DemoEvent:
    return DemoEvent(kind, message, data)


def _demo(client: Starverse, args: argparse.Namespace) -> Iterator[DemoEvent]:
    from jupyter_starverse._format import format_bytes, format_count, format_duration, format_metric
    from jupyter_starverse.errors import StarverseError
    from jupyter_starverse.jobmodel import JobSpec, JobState

    t0 = time.monotonic()
    yield _phase("phase", f"creating the demo dataset {DEMO_DATASET} in the store", phase="dataset")
    catalog = client.catalog
    source = make_demo_text(client.settings.home / "demo-source" / DEMO_DATASET)
    catalog.add_dataset(DEMO_DATASET, str(source), description="starverse demo corpus")
    status = catalog.pull(DEMO_DATASET)
    mounted = catalog.mount(DEMO_DATASET)
    yield DemoEvent(
        "dataset",
        f"dataset {DEMO_DATASET}: {format_count(status.files)} files, {format_bytes(status.size)}, "
        f"mounted at {mounted}",
        {"dataset": DEMO_DATASET, "path": str(mounted), "bytes": status.size},
    )
    from jupyter_starverse.backends import example_script

    spec = JobSpec(
        name="demo",
        script=str(example_script("ddp")),
        nodes=args.nodes,
        procs_per_node=args.procs,
        template="ddp",
        mounts=(DEMO_DATASET,),
        steps=args.steps,
        checkpoint_every=max(1, args.steps // 3),
        experiment="demo",
    )
    yield _phase("phase", "checking the script and starting the job's supervisor", phase="submit")
    backend = client.backend("local")
    job = backend.submit(client.prepare(spec))
    yield DemoEvent(
        "submitted",
        f"job {job.id}: {spec.nodes} nodes x {spec.procs_per_node} processes (torchrun, gloo, ddp), "
        f"{format_count(spec.steps)} steps",
        {"job_id": job.id, "experiment_dir": job.experiment_dir},
    )
    with tracking(job.id, "local", what="demo job"):
        job, points = yield from _follow(backend, job, args.steps, t0)
    if job.state is not JobState.SUCCEEDED:
        raise StarverseError(f"demo job {job.id} {job.state.value}: {job.reason}", hint=f"starverse jobs logs {job.id}")
    losses = [p.values["loss"] for p in points if "loss" in p.values]
    first, last = (losses[0], losses[-1]) if losses else (float("nan"), float("nan"))
    yield DemoEvent(
        "done",
        f"loss {format_metric(first)} -> {format_metric(last)} in {len(losses)} steps, "
        f"{format_duration(time.monotonic() - t0)}\nexperiment folder: {job.experiment_dir}",
        {"job_id": job.id, "first_loss": first, "last_loss": last, "experiment_dir": job.experiment_dir},
    )


def _follow(
    backend: LaunchBackend, job: Job, steps: int, t0: float
) -> Generator[DemoEvent, None, tuple[Job, list[MetricPoint]]]:
    """Say what the job does while it starts (nodes, rendezvous, process group), then every few steps."""
    from jupyter_starverse._format import format_duration, format_metric, format_step
    from jupyter_starverse.experiments import read_metrics
    from jupyter_starverse.watch import read_rank_records, startup_phase

    shown = -1
    said = ""
    every = max(1, steps // 6)
    points: list[MetricPoint] = []
    while True:
        job = backend.get(job.id)
        points = read_metrics(Path(job.experiment_dir), from_logs=False)
        if not points and not job.state.finished:
            phase = startup_phase(job, read_rank_records(job))
            if phase != said:
                said = phase
                yield _phase("phase", f"{phase} ({format_duration(time.monotonic() - t0)})", phase=phase)
        for p in points:
            if p.step > shown and (p.step % every == 0 or p.step == steps - 1):
                shown = p.step
                loss = p.values.get("loss", float("nan"))
                yield DemoEvent(
                    "step",
                    f"{format_step(p.step + 1, steps)}  loss {format_metric(loss)}  "
                    f"({format_duration(time.monotonic() - t0)})",
                    {"step": p.step, "loss": loss},
                )
        if job.state.finished:
            return job, points
        time.sleep(0.5)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("demo", help="train a small LM on 2 local nodes x 2 processes from a demo dataset")
    p.add_argument("--nodes", type=int, default=2, help="local nodes (default: 2)")
    p.add_argument("--procs", type=int, default=2, help="processes per node (default: 2)")
    p.add_argument("--steps", type=int, default=60, help="training steps (default: 60)")
    add_json_flag(p)
    p.set_defaults(run=_demo)
