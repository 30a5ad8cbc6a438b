"""Job list at scale: the job index against the full scan of every run folder, in the same run.

Run from the repository root::

    python benchmarks/bench_jobs.py [--runs 10000] [--repeat 7]

Writes ``--runs`` finished run folders (``spec.json`` + ``status.json``, as the local backend
leaves them) into a temporary experiments root, starts a real Jupyter server on loopback, and
prints medians of:

- the panel's poll of ``GET jobs``: the first answer (builds the index), a poll that changed
  nothing (``If-None-Match`` -> 304: latency and bytes on the wire), a full page of 50 rows;
  goals: an unchanged poll <= 50 ms and <= 10 KB;
- ``starverse jobs ls`` as a whole process (first run builds the index; then warm); goal <= 0.5 s;
- the baseline, measured here too: the full scan (``LocalBackend.list()`` of every run) in a
  process of its own printing the same table, and the bytes the unpaged list of every job was.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import show_load  # noqa: E402
from benchmarks._jupyter import JupyterServer as Server  # noqa: E402
from jupyter_starverse._format import format_bytes, format_count  # noqa: E402
from jupyter_starverse.experiments import ExperimentPaths, RunStatus, write_json, write_status  # noqa: E402
from jupyter_starverse.jobmodel import JobSpec  # noqa: E402

GOAL_POLL_S, GOAL_POLL_BYTES, GOAL_LS_S = 0.050, 10 * 1024, 0.5

# What `starverse jobs ls` did before the index: the full scan, then the same table.
BASELINE_LS = """
from jupyter_starverse.client import Starverse
jobs = Starverse().list_jobs(backend="local").jobs
rows = [(j.id, j.spec.title, j.backend, j.state.value) for j in jobs[:50]]
print("\\n".join("  ".join(r) for r in rows))
"""


# Where the time of a warm `jobs ls` goes: the command table (every command module) and the page.
SPLIT = """
import time
t = time.perf_counter()
from jupyter_starverse.cli import build_parser
build_parser()
parser = time.perf_counter() - t
from jupyter_starverse.client import Starverse
client = Starverse()
t = time.perf_counter()
client.job_page(limit=50)
page = time.perf_counter() - t
print(f"building the command table {parser * 1000:.0f} ms, the page from the index {page * 1000:.0f} ms")
"""


def make_runs(root: Path, count: int, experiments: int = 10) -> None:
    spec_of = {
        e: JobSpec(name=f"exp{e}", code="print(1)\n", experiment=f"exp{e}").to_json() for e in range(experiments)
    }
    base = time.time() - count - 3600
    for i in range(count):
        e = i % experiments
        job_id = f"exp{e}-20261201-{i // 60:06d}-{i:04x}"
        run = ExperimentPaths.of(root, f"exp{e}").run(job_id)
        run.make()
        write_json(run.spec, spec_of[e])
        t = base + i
        state = "failed" if i % 17 == 0 else "succeeded"
        write_status(run, RunStatus(job_id=job_id, state=state, created=t, started=t + 1, finished=t + 30))


def _median(fn: Callable[[], float], repeat: int) -> float:
    return statistics.median(fn() for _ in range(repeat))


def _timed_process(argv: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    show_load()
    home = Path(tempfile.mkdtemp(prefix="bench-jobs-"))
    root = home / "experiments"
    env = {**os.environ, "STARVERSE_HOME": str(home), "STARVERSE_EXPERIMENTS": str(root),
           "STARVERSE_STORE": str(home / "store"), "STARVERSE_BACKEND": "local", "OMP_NUM_THREADS": "1",
           "KUBECONFIG": str(home / "no-kubeconfig")}  # fmt: skip
    os.environ.update(env)
    t = time.perf_counter()
    make_runs(root, args.runs)
    print(f"{format_count(args.runs)} run folders written in {time.perf_counter() - t:.1f} s under {root}")

    starverse = [sys.executable, "-m", "jupyter_starverse.cli"]
    print("\n`starverse jobs ls` as a whole process (the 50 newest of every job)")
    cold = _timed_process([*starverse, "jobs", "ls"], env)
    warm = _median(lambda: _timed_process([*starverse, "jobs", "ls"], env), args.repeat)
    base = _median(lambda: _timed_process([sys.executable, "-c", BASELINE_LS], env), max(1, args.repeat // 3))
    print(f"  index, first run (builds it) {cold * 1000:8.0f} ms")
    print(f"  index, warm (median)         {warm * 1000:8.0f} ms   goal <= {GOAL_LS_S * 1000:.0f} ms: "
          f"{'met' if warm <= GOAL_LS_S else 'NOT met'}")  # fmt: skip
    print(f"  full scan, same table        {base * 1000:8.0f} ms   index is {base / warm:.1f}x faster")
    split = subprocess.run([sys.executable, "-c", SPLIT], env=env, check=True, capture_output=True, text=True)
    print(f"  of the warm run, in-process: {split.stdout.strip()}")

    server = Server(env, home)
    try:
        path = "/jupyter-starverse/jobs?limit=50"
        t = time.perf_counter()
        status, first_bytes, head, body = server.get(path)
        first = time.perf_counter() - t
        assert status == 200, (status, body[:300])
        etag = head["Etag"]
        total = json.loads(body)["total"]

        def poll() -> float:
            t = time.perf_counter()
            code, _, _, _ = server.get(path, {"If-None-Match": etag})
            assert code == 304, code
            return time.perf_counter() - t

        poll()
        unchanged = _median(poll, max(args.repeat, 15))
        _, poll_bytes, _, _ = server.get(path, {"If-None-Match": etag})

        def full() -> float:
            t = time.perf_counter()
            code, _, _, _ = server.get(path)
            assert code == 200
            return time.perf_counter() - t

        page = _median(full, args.repeat)
        print(f"\nGET jobs (the panel's poll; {format_count(total)} jobs in the index, pages of 50)")
        print(f"  first answer (index built in the server) {first * 1000:8.0f} ms  {format_bytes(first_bytes)}")
        print(f"  unchanged poll, If-None-Match -> 304     {unchanged * 1000:8.1f} ms  {format_bytes(poll_bytes)}   "
              f"goal <= {GOAL_POLL_S * 1000:.0f} ms and <= {format_bytes(GOAL_POLL_BYTES)}: "
              f"{'met' if unchanged <= GOAL_POLL_S and poll_bytes <= GOAL_POLL_BYTES else 'NOT met'}")  # fmt: skip
        print(f"  a page of 50 rows with progress          {page * 1000:8.0f} ms  {format_bytes(first_bytes)}")
    finally:
        server.close()

    # Baseline: the unpaged list of every job as the old route built it (full scan + every row).
    from jupyter_starverse.client import Starverse

    client = Starverse()
    t = time.perf_counter()
    jobs = client.backend("local").list()
    scan = time.perf_counter() - t
    old_bytes = len(json.dumps([j.to_json() for j in jobs]))
    print(f"\nbaseline: full scan of {format_count(len(jobs))} runs in {scan * 1000:.0f} ms "
          f"({scan / max(1, len(jobs)) * 1e6:.0f} us per run), the unpaged list {format_bytes(old_bytes)} "
          f"before any progress; unchanged poll is {scan / unchanged:.0f}x faster and "
          f"{old_bytes / poll_bytes:.0f}x smaller")  # fmt: skip


if __name__ == "__main__":
    main()
