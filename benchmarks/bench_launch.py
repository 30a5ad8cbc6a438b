"""Local launch overhead and recovery, ours against bare ``torchrun`` in the same run.

Same script (the ``ddp`` template LM), same topology (``--nodes`` x ``--procs``), same
steps, interleaved ``--repeats`` times: bare torchrun, ours cold (``STARVERSE_WARM_POOL=off``:
interpreters and torchrun agents as before) and ours warm (ranks forked from the warm pool a
first, untimed job of ours started). Prints medians, the ratios against bare torchrun and the
machine load beside each run, then recovery time and lost steps after a worker kill and a node
kill (ours only: bare torchrun has no node relaunch).

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


def run_ours(settings: Settings, args: argparse.Namespace, n: int | str) -> tuple[float, float, str]:
    """Submit to first step, steps/s, and how the job started (``warm`` / ``cold``)."""
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
    kind = "warm" if "warm start from pool" in (Path(done.experiment_dir) / "supervisor.log").read_text() else "cold"
    return (points[0].time or 0) - t0, _rate(points), kind


def warm_up(settings: Settings, args: argparse.Namespace, tag: str) -> None:
    """One untimed job of ours: it starts the warm pool, which is then waited for."""
    run_ours(settings, args, f"warmup-{tag}")
    backend = LocalBackend(settings)
    deadline = time.monotonic() + 600
    while not any(p.ready for p in backend.pools()):
        if time.monotonic() > deadline:
            raise TimeoutError("the warm pool did not come up")
        time.sleep(0.2)


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
        os.environ["STARVERSE_WARM_POOL"] = "auto"
        settings = Settings.from_env()
        cold_settings = settings.replace(warm_pool="off")
        warm_up(settings, args, "0")
        rows: dict[str, list[tuple[float, float]]] = {"bare torchrun": [], "ours cold": [], "ours warm": []}
        loads: list[float] = []
        for n in range(args.repeats):
            loads.append(os.getloadavg()[0])
            rows["bare torchrun"].append(run_bare(Path(tmp) / "bare", args, n))
            first, rate, kind = run_ours(cold_settings, args, f"cold-{n}")
            rows["ours cold"].append((first, rate))
            first, rate, kind = run_ours(settings, args, f"warm-{n}")
            if kind != "warm":  # the pool retired (the package changed under it): warm it again, once
                print(f"run {n}: the warm job started cold; warming the pool again", flush=True)
                warm_up(settings, args, str(n + 1))
                first, rate, kind = run_ours(settings, args, f"warm-{n}b")
            rows["ours warm"].append((first, rate) if kind == "warm" else (float("nan"), rate))
            print(
                f"run {n} (load {loads[-1]:.1f}): first step bare {rows['bare torchrun'][-1][0]:.1f}s "
                f"cold {rows['ours cold'][-1][0]:.1f}s warm {rows['ours warm'][-1][0]:.1f}s",
                flush=True,
            )
        medians = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for k, v in rows.items()}
        f_b = medians["bare torchrun"][0]
        topo = f"{args.nodes} nodes x {args.procs} procs, {args.steps} steps, median of {args.repeats}"
        print(f"\n{topo}; machine load (1 min) {min(loads):.1f}-{max(loads):.1f}, now {os.getloadavg()[0]:.1f}")
        print(f"{'':<14} {'submit->first step':>19} {'vs bare':>8} {'steps/s':>8}  goal")
        goals = {"bare torchrun": "", "ours cold": "<= 1.10x", "ours warm": "<= 0.50x"}
        for name, (first, rate) in medians.items():
            print(f"{name:<14} {first:18.2f}s {first / f_b:7.2f}x {rate:8.2f}  {goals[name]}")
        if not args.no_recovery:
            for kind in ("worker", "node"):
                seconds, lost = recovery(settings, args, kind)
                print(f"{kind} kill: recovered in {seconds:.1f}s, {lost} steps redone (checkpoint every 5)")
        LocalBackend(settings).stop_pools()


if __name__ == "__main__":
    main()
