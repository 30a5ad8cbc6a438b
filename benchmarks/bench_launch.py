"""Local launch overhead and recovery, ours against bare ``torchrun`` in the same run.

Same script (the ``ddp`` template LM), same topology (``--nodes`` x ``--procs``), same
steps, alternating ours / bare ``--repeats`` times. Prints medians and the ratio ours/bare
for submit-to-first-step and steps/s, then recovery time and lost steps after a worker
kill and a node kill (ours only: bare torchrun has no node relaunch).

    python benchmarks/bench_launch.py --nodes 2 --procs 2 --steps 40 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from jupyter_starverse._procs import job_processes
from jupyter_starverse._settings import Settings
from jupyter_starverse.backends.local._local import LocalBackend
from jupyter_starverse.backends.templates import example_script
from jupyter_starverse.experiments import MetricPoint, read_metrics
from jupyter_starverse.jobmodel import JobSpec, JobState


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_points(run: Path, until: int, timeout: float = 600) -> list[MetricPoint]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        points = read_metrics(run, from_logs=False)
        if points and points[-1].step >= until:
            return points
        time.sleep(0.1)
    raise TimeoutError(f"no step {until} in {run}")


def _rate(points: list[MetricPoint], skip: int = 5) -> float:
    timed = [p for p in points if p.time is not None][skip:]
    return (timed[-1].step - timed[0].step) / ((timed[-1].time or 0) - (timed[0].time or 0))


def run_ours(settings: Settings, args: argparse.Namespace, n: int) -> tuple[float, float]:
    backend = LocalBackend(settings)
    spec = JobSpec(
        name=f"bench-{n}",
        script=str(example_script("ddp")),
        nodes=args.nodes,
        procs_per_node=args.procs,
        steps=args.steps,
    )
    t0 = time.time()
    job = backend.submit(spec)
    done = backend.wait(job.id, timeout=600)
    if done.state is not JobState.SUCCEEDED:
        raise RuntimeError(f"{job.id}: {done.reason}")
    points = read_metrics(Path(done.experiment_dir), from_logs=False)
    return (points[0].time or 0) - t0, _rate(points)


def run_bare(root: Path, args: argparse.Namespace, n: int) -> tuple[float, float]:
    run = root / f"bare-{n}"
    run.mkdir(parents=True)
    port = _free_port()
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "STARVERSE_EXPERIMENT_DIR": str(run),
        "STARVERSE_STEPS": str(args.steps),
        "TENSORBOARD_LOGDIR": str(run / "tensorboard"),
        "PYTHONUNBUFFERED": "1",
    }
    t0 = time.time()
    agents = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                f"--nnodes={args.nodes}",
                f"--nproc-per-node={args.procs}",
                "--rdzv-backend=c10d",
                f"--rdzv-endpoint=127.0.0.1:{port}",
                f"--rdzv-id=bare-{n}",
                "--local-addr=127.0.0.1",
                str(example_script("ddp")),
            ],
            env=env,
            stdout=(run / f"node{i}.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        for i in range(args.nodes)
    ]
    codes = [a.wait(timeout=600) for a in agents]
    if any(codes):
        raise RuntimeError(f"bare torchrun failed: {codes}, see {run}")
    points = read_metrics(run, from_logs=False)
    return (points[0].time or 0) - t0, _rate(points)


def recovery(settings: Settings, args: argparse.Namespace, kind: str) -> tuple[float, int]:
    """Seconds from the kill to the next new step, and steps lost (redone after the restart)."""
    backend = LocalBackend(settings)
    every = 5
    spec = JobSpec(
        name=f"rec-{kind}",
        script=str(example_script("ddp")),
        nodes=args.nodes,
        procs_per_node=args.procs,
        steps=args.steps + 30,
        checkpoint_every=every,
        max_restarts=2,
    )
    job = backend.submit(spec)
    run = Path(job.experiment_dir)
    points = _wait_points(run, 2 * every + 2)
    last = points[-1].step
    t_kill = time.time()
    if kind == "worker":
        pid = json.loads((run / "pids" / f"rank{args.procs * args.nodes - 1}.json").read_text())["pid"]
        os.kill(pid, signal.SIGKILL)
    else:
        for pid in job_processes(job.id, node=args.nodes - 1):
            os.kill(pid, signal.SIGKILL)
    count = len(read_metrics(run, from_logs=False))
    while True:
        points = read_metrics(run, from_logs=False)
        after = [p for p in points[count:] if (p.time or 0) > t_kill]
        dips = [p for p in after if p.step <= last]
        if dips:
            resumed = dips[0]
            break
        if backend.get(job.id).state.finished:
            raise RuntimeError(f"{job.id} ended without a restart: {backend.get(job.id).reason}")
        time.sleep(0.1)
    backend.cancel(job.id)
    return (resumed.time or 0) - t_kill, last - resumed.step + 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-recovery", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["STARVERSE_HOME"] = tmp
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        settings = Settings.from_env()
        ours: list[tuple[float, float]] = []
        bare: list[tuple[float, float]] = []
        for n in range(args.repeats):
            bare.append(run_bare(Path(tmp) / "bare", args, n))
            ours.append(run_ours(settings, args, n))
            print(
                f"run {n}: first step ours {ours[-1][0]:.1f}s bare {bare[-1][0]:.1f}s; "
                f"steps/s ours {ours[-1][1]:.2f} bare {bare[-1][1]:.2f}",
                flush=True,
            )
        f_o, f_b = statistics.median(o[0] for o in ours), statistics.median(b[0] for b in bare)
        r_o, r_b = statistics.median(o[1] for o in ours), statistics.median(b[1] for b in bare)
        topo = f"{args.nodes} nodes x {args.procs} procs, {args.steps} steps, median of {args.repeats}"
        print(f"\n{topo}")
        print(
            f"submit to first step: ours {f_o:.2f}s  bare torchrun {f_b:.2f}s  ratio {f_o / f_b:.2f}x (goal <= 1.10x)"
        )
        print(f"steps/s:              ours {r_o:.2f}   bare {r_b:.2f}   time per step ours/bare {r_b / r_o:.2f}x")
        if not args.no_recovery:
            for kind in ("worker", "node"):
                seconds, lost = recovery(settings, args, kind)
                print(f"{kind} kill: recovered in {seconds:.1f}s, {lost} steps redone (checkpoint every 5)")


if __name__ == "__main__":
    main()
