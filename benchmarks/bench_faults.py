"""Faults on real local jobs: how fast they recover, what they redo, what they cost.

Run from the repository root::

    python benchmarks/bench_faults.py [--steps 80] [--every 10] [--sleep 0.1]

Each scenario runs a 2-node x 2-process CPU job (gloo, ``jupyter_starverse.runtime``, a
checkpoint every ``--every`` steps, a budget cap) and injects one fault once training passed
step 15:

- ``worker kill``: SIGKILL of rank 2;
- ``agent kill``: SIGKILL of node 1's torchrun agent alone (its rank keeps running);
- ``preemption``: SIGTERM of rank 2 (what a provider sends);
- ``supervisor kill``: SIGKILL of the job's supervisor (a reader notices and a new one takes over).

Printed per scenario: recovery time (fault -> the first step of the next attempt), steps redone
(steps logged again by rank 0), final state, restarts, money billed against the cap. Goal:
every run ``succeeded``, at most one checkpoint interval redone, worker recovery <= 15 s,
node-level events (agent, preemption of a node, supervisor) <= 30 s, no run billed past its cap.

``--backends`` adds (default: every one this machine can run):

- ``kubernetes``: the test API server (``tests/k8s``) with its kubelet and Job / JobSet
  controllers; ``jobs preempt`` (a graceful pod delete) and an eviction (``DisruptionTarget``) on
  the Indexed Job and JobSet kinds. Its pods do not train: the figure is the backend's whole-group
  relaunch (fault -> every node of attempt 2 running), the control loop a real cluster adds its
  scheduling and image start-up to.
- ``slurm``: a real slurmctld + 2 slurmd (``tests/slurm/_cluster``, started once here);
  ``jobs preempt`` (``scancel --signal=TERM``) on a 2-node job training the same script:
  recovery (drill -> the first step of the requeued attempt), steps redone, final state.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import show_load  # noqa: E402
from jupyter_starverse._settings import Settings  # noqa: E402
from jupyter_starverse.backends.local._local import LocalBackend  # noqa: E402
from jupyter_starverse.costs import read_cost  # noqa: E402
from jupyter_starverse.experiments import read_metrics, read_status  # noqa: E402
from jupyter_starverse.jobmodel import JobSpec  # noqa: E402
from tests.backends._local import TINY as TRAIN  # noqa: E402  (the local backend tests' training script)

BUDGET = Decimal("1.00")
PRICE_PER_NODE_HOUR = "3.6"  # 0.001 per node-second


def _pid(run: Path, rank: int) -> int:
    return int(json.loads((run / "pids" / f"rank{rank}.json").read_text())["pid"])


def _kill_worker(run: Path) -> None:
    os.kill(_pid(run, 2), signal.SIGKILL)


def _kill_agent(run: Path) -> None:
    status = read_status(run)
    assert status is not None and status.nodes[1].pid
    os.kill(status.nodes[1].pid, signal.SIGKILL)


def _preempt(run: Path) -> None:
    os.kill(_pid(run, 2), signal.SIGTERM)


def _kill_supervisor(run: Path) -> None:
    status = read_status(run)
    assert status is not None and status.supervisor_pid
    os.kill(status.supervisor_pid, signal.SIGKILL)


SCENARIOS: dict[str, Callable[[Path], None]] = {
    "worker kill": _kill_worker,
    "agent kill": _kill_agent,
    "preemption": _preempt,
    "supervisor kill": _kill_supervisor,
}


def _rank0(run: Path) -> list[tuple[int, float]]:
    return [(p.step, p.time or 0.0) for p in read_metrics(run, from_logs=False) if p.rank == 0]


def run_one(backend: LocalBackend, name: str, fault: Callable[[Path], None], args: argparse.Namespace) -> dict:
    spec = JobSpec(
        name=name.replace(" ", "-"), code=TRAIN, nodes=2, procs_per_node=2, steps=args.steps,
        checkpoint_every=args.every, budget=BUDGET, env={"STEP_SLEEP": str(args.sleep)},
    )  # fmt: skip
    job = backend.submit(spec)
    run = Path(job.experiment_dir)
    deadline = time.monotonic() + 300
    while not any(s >= 15 for s, _ in _rank0(run)):
        if time.monotonic() > deadline or backend.get(job.id).state.finished:
            raise SystemExit(f"{name}: the job never reached step 15: {backend.get(job.id).reason}")
        time.sleep(0.05)
    before = _rank0(run)
    at = time.time()
    fault(run)
    while True:
        current = backend.get(job.id)  # a reader: notices a dead supervisor too
        if current.state.finished:
            break
        if time.monotonic() > deadline + 300:
            raise SystemExit(f"{name}: the job did not finish")
        time.sleep(0.05)
    points = _rank0(run)
    # recovery: the fault -> the first step of the next attempt (its nodes' second launch)
    status = read_status(run)
    relaunch = min((n.launches[1][0] for n in status.nodes if len(n.launches) > 1), default=None) if status else None
    later = [t for _, t in points if relaunch is not None and t > relaunch]
    resumed_at = min(later) if later else None
    last_before = max(s for s, _ in before)
    redone = sum(1 for s, t in points if t > at and s <= last_before)
    record = read_cost(job.experiment_dir)
    return {
        "scenario": name,
        "recovery_s": None if resumed_at is None else resumed_at - at,
        "redone": redone,
        "state": current.state.value,
        "restarts": current.restarts,
        "last_step": max(s for s, _ in points),
        "billed": record.cost.amount,
        "exact": record.cost.exact_amount,
        "cause": (read_status(run).events or [None])[-1],  # type: ignore[union-attr]
    }


def kubernetes_rows() -> list[tuple[str, ...]]:
    """Recovery in the cluster on the test API server (the Job controller recreates the pod):
    preempt drill and eviction, job and JobSet."""
    from jupyter_starverse.backends.kubernetes import KubernetesBackend
    from jupyter_starverse.jobmodel import JobState
    from tests.k8s.apiserver import PodPlan, serve_kube

    def plan(pod: dict) -> PodPlan:
        # the cluster recreates only the pod that ended (it carries its index's failure counts);
        # the first pods run until the replacement runs, then the job completes
        notes = pod["metadata"].get("annotations") or {}
        counts = ("batch.kubernetes.io/job-index-failure-count", "batch.kubernetes.io/job-index-ignored-failure-count")
        replaced = any(int(notes.get(k, 0)) for k in counts)
        if replaced:
            return PodPlan(lines=("[default0]:step",), run_seconds=0.5)
        return PodPlan(lines=("[default0]:step",), run_seconds=0, until=release[0])

    rows = []
    release = [threading.Event()]
    with tempfile.TemporaryDirectory() as tmp, serve_kube(Path(tmp), crds=("jobset",)) as kube:
        os.environ["KUBECONFIG"] = str(kube.kubeconfig)
        os.environ.pop("KUBERNETES_SERVICE_HOST", None)
        kube.set_plan(plan)
        settings = Settings.from_env({"STARVERSE_HOME": f"{tmp}/home", "KUBECONFIG": str(kube.kubeconfig)})
        for kind in ("job", "jobset"):
            for fault in ("preempt drill", "eviction"):
                backend = KubernetesBackend(settings, kind=kind)
                release[0] = threading.Event()
                job = backend.submit(JobSpec(name="spot", code="pass", nodes=4, procs_per_node=1))
                next(j for j in backend.watch_job(job.id, timeout=30) if j.state is JobState.RUNNING)
                at = time.monotonic()
                if fault == "preempt drill":
                    backend.preempt(job.id)
                else:
                    pod = next(
                        p
                        for p in kube.objects("pods", labels=f"starverse.io/job-id={job.id}")
                        if p["status"]["phase"] == "Running"
                    )
                    kube.evict(pod["metadata"]["name"])
                seen, running_again = [], None
                while True:
                    current = backend.get(job.id)
                    if not seen or seen[-1] != current.state.value:
                        seen.append(current.state.value)
                    if running_again is None and current.restarts and current.state is JobState.RUNNING:
                        running_again = time.monotonic() - at
                        release[0].set()
                    if current.state.finished or time.monotonic() - at > 60:
                        break
                    time.sleep(0.01)
                rows.append((f"kubernetes/{kind}", fault, f"{running_again:.2f} s" if running_again else "-",
                             " -> ".join(seen), current.state.value, str(current.restarts)))  # fmt: skip
                print(f"  done: kubernetes {kind} {fault}", file=sys.stderr, flush=True)
    return rows


def slurm_rows(args: argparse.Namespace) -> list[tuple[str, ...]]:
    """The preempt drill on the real test Slurm cluster: requeue and resume of a 2-node job."""
    from jupyter_starverse.backends.slurm import SlurmBackend
    from tests.slurm._cluster import missing_programs, start_cluster

    if missing_programs():
        return [("slurm", "preempt drill", "-", f"not installed ({', '.join(missing_programs())})", "-", "-")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-faults-", ignore_cleanup_errors=True) as tmp:
        cluster = start_cluster(Path(tmp) / "cluster")
        try:
            os.environ.update(cluster.env)
            settings = Settings.from_env({**os.environ, "STARVERSE_HOME": f"{tmp}/home", "STARVERSE_MODE": "cpu"})
            backend = SlurmBackend(settings, poll=0.2, cancel_grace=15.0)
            spec = JobSpec(name="spot", code=TRAIN, nodes=2, procs_per_node=1, steps=args.steps,
                           checkpoint_every=args.every, env={"STEP_SLEEP": str(args.sleep)})  # fmt: skip
            job = backend.submit(spec)
            run = Path(job.experiment_dir)
            deadline = time.monotonic() + 300
            while not any(s >= 15 for s, _ in _rank0(run)) and time.monotonic() < deadline:
                time.sleep(0.05)
            at = time.time()
            backend.preempt(job.id)
            seen: list[str] = []
            while True:
                current = backend.get(job.id)
                if not seen or seen[-1] != current.state.value:
                    seen.append(current.state.value)
                if current.state.finished or time.monotonic() > deadline + 300:
                    break
                time.sleep(0.1)
            points = _rank0(run)
            stop = json.loads((run / "stops" / "attempt-0" / "rank0.json").read_text())  # the SIGTERM checkpoint
            resumed = [t for s, t in points if s == int(stop["checkpoint_step"]) + 1 and t > float(stop["time"])]
            redone = len(points) - len({s for s, _ in points})
            recovery = (min(resumed) - at) if resumed else None
            rows.append(("slurm", "preempt drill", "-" if recovery is None else f"{recovery:.1f} s",
                         " -> ".join(seen), current.state.value, str(current.restarts), f"{redone}"))  # fmt: skip
        finally:
            cluster.stop()
    print("  done: slurm preempt drill", file=sys.stderr, flush=True)
    return rows


def _print(table: list[tuple[str, ...]]) -> None:
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--sleep", type=float, default=0.1)
    parser.add_argument("--only", default=None, help="one scenario")
    parser.add_argument("--backends", default="local,kubernetes,slurm", help="comma-separated")
    args = parser.parse_args()
    show_load()
    chosen = {b.strip() for b in args.backends.split(",")}
    if "kubernetes" in chosen:
        print("kubernetes (test API server: the Job controller recreates the pod; pods do not train)")
        _print([("backend", "fault", "fault -> running again", "states", "final", "restarts"), *kubernetes_rows()])
        print()
    if "slurm" in chosen:
        print(f"slurm (real test cluster, 2 nodes x 1 process, a checkpoint every {args.every} steps)")
        _print([("backend", "fault", "recovery", "states", "final", "restarts", "steps redone"), *slurm_rows(args)])
        print()
    if "local" not in chosen:
        return
    with tempfile.TemporaryDirectory() as tmp:
        prices = Path(tmp) / "prices.json"
        prices.write_text(json.dumps({"currency": "CNY", "gpus": {"rtx4090": {"on_demand": "1.8"}},
                                      "cpu_node": {"on_demand": PRICE_PER_NODE_HOUR}}))  # fmt: skip
        settings = Settings.from_env({"STARVERSE_HOME": tmp, "STARVERSE_PRICES": str(prices)})
        os.environ["STARVERSE_PRICES"] = str(prices)
        backend = LocalBackend(settings)
        rows = []
        for name, fault in SCENARIOS.items():
            if args.only and args.only != name:
                continue
            rows.append(run_one(backend, name, fault, args))
            print(f"  done: {name}", file=sys.stderr, flush=True)
    header = ("scenario", "recovery", "redone", "state", "restarts", "last step", "billed / cap", "cause")
    table = [header]
    for r in rows:
        cause = r["cause"]
        table.append((
            r["scenario"],
            "-" if r["recovery_s"] is None else f"{r['recovery_s']:.1f} s",
            f"{r['redone']} (<= {args.every})",
            r["state"],
            str(r["restarts"]),
            f"{r['last_step']}/{args.steps - 1}",
            f"{r['exact']:.4f} / {BUDGET} CNY" + (" OVER" if r["exact"] > BUDGET else ""),
            cause.cause if cause else "-",
        ))  # fmt: skip
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    ok = all(
        r["state"] == "succeeded"
        and r["redone"] <= args.every
        and r["exact"] <= BUDGET
        and r["recovery_s"] is not None
        and r["recovery_s"] <= (15 if r["scenario"] == "worker kill" else 30)  # the others lose a node
        for r in rows
    )
    print("goal met" if ok else "goal NOT met")


if __name__ == "__main__":
    main()
