"""Slurm against the local backend: the same 2 x 1 job, in one run, on one machine.

Starts a real one-host Slurm cluster (munged, slurmctld, slurmd n1 and n2, as the tests do:
``tests/slurm/_cluster.py``), then alternates the same job on the Slurm and the local backend
``--repeats`` times. Prints medians of submit-to-first-step and steps/s, and the ratio
slurm/local. With submitit installed (``pip install submitit``) it also runs the same script through
submitit's SlurmExecutor (2 nodes x 1 task, torch.distributed from its TorchDistributedEnvironment),
the baseline of the Slurm row: ratio slurm/submitit. Needs ``apt-get install -y slurm-wlm munge``
and root (SlurmUser=root).

    python benchmarks/bench_slurm.py --steps 60 --repeats 3            # the tiny linear model
    python benchmarks/bench_slurm.py --script ddp --steps 40           # the ddp template's LM
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jupyter_starverse._settings import Settings
from jupyter_starverse.backends.local import LocalBackend
from jupyter_starverse.backends.slurm import SlurmBackend
from jupyter_starverse.backends.templates import example_script
from jupyter_starverse.experiments import MetricPoint, read_metrics
from jupyter_starverse.jobmodel import JobSpec, JobState, LaunchBackend
from tests.slurm._cluster import APT_HINT, missing_programs, start_cluster
from tests.slurm._jobs import TINY


def _rate(points: list[MetricPoint], skip: int = 5) -> float:
    timed = [p for p in points if p.time is not None][skip:]
    if len(timed) < 2:
        return float("nan")
    return (timed[-1].step - timed[0].step) / ((timed[-1].time or 0) - (timed[0].time or 0))


def _load() -> str:
    """The machine's load (1, 5, 15 min) and cores: ratios hold under load, absolute seconds do not."""
    one, five, fifteen = os.getloadavg()
    return f"load {one:.1f}/{five:.1f}/{fifteen:.1f} on {os.cpu_count()} cores"


def run_once(backend: LaunchBackend, spec: JobSpec) -> tuple[float, float]:
    """Seconds from the submit call to the first logged step, and steps/s after the first 5."""
    began = time.time()
    job = backend.submit(spec)
    job = backend.wait(job.id, timeout=600)
    if job.state is not JobState.SUCCEEDED:
        logs = sorted(Path(job.experiment_dir).glob("*.log")) + sorted(Path(job.experiment_dir).glob("logs/*.log"))
        tails = "".join(f"\n--- {f.name}\n" + "\n".join(f.read_text(errors="replace").splitlines()[-15:]) for f in logs)
        raise RuntimeError(f"{backend.name} job {job.id} {job.state.value}: {job.reason}{tails}")
    points = read_metrics(Path(job.experiment_dir), from_logs=False)
    first = min(p.time for p in points if p.time is not None)
    return first - began, _rate(points)


def _submitit_task(code: str, run_dir: str, steps: int) -> None:
    """One rank under submitit: its distributed environment, then the script (as torchrun would run it)."""
    import submitit

    submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    os.environ.update(
        MASTER_ADDR="127.0.0.1",  # the test cluster's node names (n1, n2) are not host names
        STARVERSE_JOB_ID=os.environ.get("SLURM_JOB_ID", "submitit"),
        STARVERSE_EXPERIMENT_DIR=run_dir,
        STARVERSE_CHECKPOINT_DIR=f"{run_dir}/checkpoints",
        STARVERSE_STEPS=str(steps),
        OMP_NUM_THREADS="1",
    )
    exec(compile(code, f"{run_dir}/train.py", "exec"), {"__name__": "__main__"})


def run_submitit(tmp: str, i: int, code: str, steps: int) -> tuple[float, float]:
    """Seconds from submitit's submit to the first logged step, and steps/s, of the same 2 x 1 job."""
    import submitit

    run_dir = f"{tmp}/home/experiments/bench-submitit-{i}"
    Path(run_dir).mkdir(parents=True)
    executor = submitit.SlurmExecutor(folder=f"{run_dir}/submitit")
    executor.update_parameters(nodes=2, ntasks_per_node=1, cpus_per_task=1, time=30, signal_delay_s=30)
    began = time.time()
    job = executor.submit(_submitit_task, code, run_dir, steps)
    job.results()  # waits (submitit polls squeue/sacct), raises the task's error
    points = read_metrics(Path(run_dir), from_logs=False)
    first = min(p.time for p in points if p.time is not None)
    return first - began, _rate(points)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--script", choices=("tiny", "ddp"), default="tiny")
    args = parser.parse_args()
    missing = missing_programs()
    if missing:
        print(f"Slurm is not installed (no {', '.join(missing)}): {APT_HINT}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-slurm-", ignore_cleanup_errors=True) as tmp:
        cluster = start_cluster(Path(tmp) / "cluster")
        try:
            os.environ.update(cluster.env)
            os.environ.setdefault("OMP_NUM_THREADS", "1")
            settings = Settings.from_env({**os.environ, "STARVERSE_HOME": f"{tmp}/home", "STARVERSE_MODE": "cpu"})
            backends: list[LaunchBackend] = [SlurmBackend(settings, poll=0.2), LocalBackend(settings)]
            source = {"code": TINY} if args.script == "tiny" else {"script": str(example_script("ddp"))}
            results: dict[str, list[tuple[float, float]]] = {b.name: [] for b in backends}
            try:
                import submitit  # noqa: F401
            except ImportError:
                print("submitit is not installed (pip install submitit): no submitit row", file=sys.stderr)
            else:
                results["submitit"] = []
            for i in range(args.repeats):
                if "submitit" in results and args.script == "tiny":
                    first, rate = run_submitit(tmp, i, TINY, args.steps)
                    results["submitit"].append((first, rate))
                    print(f"  submitit try {i + 1}: first step after {first:5.2f} s, {rate:6.2f} steps/s  {_load()}")
                for backend in backends:
                    spec = JobSpec(
                        name=f"bench-{backend.name}-{i}", nodes=2, procs_per_node=1, steps=args.steps, **source
                    )
                    first, rate = run_once(backend, spec)
                    results[backend.name].append((first, rate))
                    said = f"first step after {first:5.2f} s, {rate:6.2f} steps/s"
                    print(f"  {backend.name:6s} try {i + 1}: {said}  {_load()}")
        finally:
            cluster.stop()
    med = {
        name: (statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs)) for name, rs in results.items()
    }
    print(f"\n2 nodes x 1 process, {args.steps} steps of the {args.script} script, {args.repeats} runs each (medians)")
    print(f"interleaved (submitit, slurm, local per round); {_load()} at the end")
    print(f"{'':8s}{'submit->first step':>20s}{'steps/s':>10s}")
    for name, (first, rate) in med.items():
        print(f"{name:8s}{first:18.2f} s{rate:10.2f}")
    (s_first, s_rate), (l_first, l_rate) = med["slurm"], med["local"]
    print(f"{'ratio':8s}{s_first / l_first:17.2f} x{s_rate / l_rate:9.2f} x   (slurm / local)")
    if med.get("submitit"):
        b_first, b_rate = med["submitit"]
        print(f"{'ratio':8s}{s_first / b_first:17.2f} x{s_rate / b_rate:9.2f} x   (slurm / submitit)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
