"""``starverse demo``: the main job on the embedded default, end to end, in about a minute.

Creates a small text dataset in the store through the catalog, mounts it, trains a small
transformer LM on 2 local nodes x 2 processes with the ``ddp`` template, streams the
progress, and prints the loss falling and the experiment folder.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_starverse.client import Starverse
from jupyter_starverse.errors import StarverseError
from jupyter_starverse.experiments import read_metrics
from jupyter_starverse.jobmodel import JobSpec, JobState

from ._common import add_json_flag

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
    """One line of the demo's progress (``kind``: dataset, submitted, step, done)."""

    kind: str
    message: str
    data: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, **self.data}

    def __str__(self) -> str:
        return self.message


def _demo(client: Starverse, args: argparse.Namespace) -> Iterator[DemoEvent]:
    catalog = client.catalog
    source = make_demo_text(client.settings.home / "demo-source" / DEMO_DATASET)
    catalog.add_dataset(DEMO_DATASET, str(source), description="starverse demo corpus")
    status = catalog.pull(DEMO_DATASET)
    mounted = catalog.mount(DEMO_DATASET)
    yield DemoEvent(
        "dataset",
        f"dataset {DEMO_DATASET}: {status.files} files, {status.size} bytes, mounted at {mounted}",
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
    backend = client.backend("local")
    job = backend.submit(client.prepare(spec))
    t0 = time.monotonic()
    yield DemoEvent(
        "submitted",
        f"job {job.id}: {spec.nodes} nodes x {spec.procs_per_node} processes (torchrun, gloo, ddp), {spec.steps} steps",
        {"job_id": job.id, "experiment_dir": job.experiment_dir},
    )
    shown = -1
    every = max(1, args.steps // 6)
    while True:
        job = backend.get(job.id)
        points = read_metrics(Path(job.experiment_dir), from_logs=False)
        for p in points:
            if p.step > shown and (p.step % every == 0 or p.step == args.steps - 1):
                shown = p.step
                loss = p.values.get("loss", float("nan"))
                yield DemoEvent(
                    "step",
                    f"step {p.step:>4}/{args.steps}  loss {loss:.3f}  ({time.monotonic() - t0:.0f}s)",
                    {"step": p.step, "loss": loss},
                )
        if job.state.finished:
            break
        time.sleep(0.5)
    if job.state is not JobState.SUCCEEDED:
        raise StarverseError(f"demo job {job.id} {job.state.value}: {job.reason}", hint=f"starverse jobs logs {job.id}")
    losses = [p.values["loss"] for p in points if "loss" in p.values]
    first, last = (losses[0], losses[-1]) if losses else (float("nan"), float("nan"))
    yield DemoEvent(
        "done",
        f"loss {first:.3f} -> {last:.3f} in {len(losses)} steps, {time.monotonic() - t0:.0f}s\n"
        f"experiment folder: {job.experiment_dir}",
        {"job_id": job.id, "first_loss": first, "last_loss": last, "experiment_dir": job.experiment_dir},
    )


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("demo", help="train a small LM on 2 local nodes x 2 processes from a demo dataset")
    p.add_argument("--nodes", type=int, default=2, help="local nodes (default: 2)")
    p.add_argument("--procs", type=int, default=2, help="processes per node (default: 2)")
    p.add_argument("--steps", type=int, default=60, help="training steps (default: 60)")
    add_json_flag(p)
    p.set_defaults(run=_demo)
