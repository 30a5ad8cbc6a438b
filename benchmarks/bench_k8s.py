"""Kubernetes backend against the test API server: submit cost by size, watch/log fan-in.

Run from the repository root::

    python benchmarks/bench_k8s.py [--repeat 7] [--fan-in 64]

Prints, for 1, 16, 128 and 512 nodes: objects created, API calls, and median times of
building the manifests and of ``submit`` (client side = wall time minus the time the server
spent answering), with ratios against the 1-node baseline of the same run. Then the time for
``logs(follow=True)`` to drain every line of a 64-pod job, and for ``wait`` to see it finish.
Goals: objects constant in the size; client-side submit <= 100 ms at 512 nodes.
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
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import show_load  # noqa: E402
from jupyter_starverse._settings import Settings  # noqa: E402
from jupyter_starverse.backends.kubernetes import KubernetesBackend  # noqa: E402
from jupyter_starverse.jobmodel import JobSpec  # noqa: E402
from tests.k8s.apiserver import PodPlan, serve_kube  # noqa: E402


def _settings(home: Path) -> Settings:
    return Settings.from_env({"STARVERSE_HOME": str(home), "STARVERSE_USER": "bench"})


class RemoteServer:
    """The test API server in its own process, so it does not share our GIL (as a real one)."""

    def __init__(self, directory: Path, *, controllers: bool, lines: int = 0) -> None:
        argv = [sys.executable, __file__, "--serve", str(directory), "--lines", str(lines)]
        if not controllers:
            argv.append("--no-controllers")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.url, kubeconfig = self.proc.stdout.readline().split()
        os.environ["KUBECONFIG"] = kubeconfig

    def calls(self) -> list[dict[str, Any]]:
        with urllib.request.urlopen(f"{self.url}/_test/calls") as resp:
            return [c for c in json.loads(resp.read())["calls"] if not c["path"].startswith("/_test")]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def serve(directory: Path, *, controllers: bool, lines: int) -> None:
    with serve_kube(directory) as kube:
        if not controllers:
            kube.controllers.stop()  # submit alone: no pods, so 512 nodes cost what the client costs
        kube.set_plan(lambda pod: PodPlan(lines=tuple(f"[default0]:step {i}" for i in range(lines)), run_seconds=0.2))
        print(kube.url, kube.kubeconfig, flush=True)
        sys.stdin.read()


def bench_submit(tmp: Path, repeat: int) -> None:
    server = RemoteServer(tmp, controllers=False)
    try:
        backend = KubernetesBackend(_settings(tmp / "home"))
        backend.list()  # load the configuration and the client once, outside the timings
        print(
            f"{'nodes':>6} {'objects':>8} {'API calls':>10} {'build ms':>9} {'submit ms':>10} "
            f"{'client ms':>10} {'x 1-node':>9}"
        )
        base = None
        for nodes in (1, 16, 128, 512):
            spec = JobSpec(name=f"bench{nodes}", code="pass", nodes=nodes, procs_per_node=8, accelerator="a100-80g")
            builds, walls, clients, objects, calls = [], [], [], 0, 0
            for _ in range(repeat):
                t = time.perf_counter()
                backend.plan(spec)
                builds.append(time.perf_counter() - t)
                before = len(server.calls())
                t = time.perf_counter()
                backend.submit(spec)
                wall = time.perf_counter() - t
                made = server.calls()[before:]
                walls.append(wall)
                clients.append(wall - sum(c["seconds"] for c in made))
                objects, calls = sum(c["method"] == "POST" for c in made), len(made)
            client = statistics.median(clients)
            base = base or client
            print(
                f"{nodes:>6} {objects:>8} {calls:>10} {statistics.median(builds) * 1e3:>9.1f} "
                f"{statistics.median(walls) * 1e3:>10.1f} {client * 1e3:>10.1f} {client / base:>9.2f}"
            )
    finally:
        server.close()


def bench_fan_in(tmp: Path, pods: int, lines: int) -> None:
    server = RemoteServer(tmp, controllers=True, lines=lines)
    try:
        backend = KubernetesBackend(_settings(tmp / "home"))
        backend.list()
        spec = JobSpec(name="fanin", code="pass", nodes=pods, procs_per_node=1)
        t = time.perf_counter()
        job = backend.submit(spec)
        got = sum(1 for _ in backend.logs(job.id, follow=True))
        t_logs = time.perf_counter() - t
        final = backend.wait(job.id, timeout=300)
        t_wait = time.perf_counter() - t
        calls = server.calls()
        watches = sum("watch=true" in c["query"] for c in calls)
        print(
            f"fan-in {pods} pods: {got} of {pods * lines} lines, submit -> last line {t_logs:.2f} s; "
            f"wait saw {final.state.value} at {t_wait:.2f} s; {len(calls)} API calls ({watches} watches, "
            f"{sum(c['path'].endswith('/log') for c in calls)} log streams)"
        )
    finally:
        server.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--fan-in", type=int, default=64)
    ap.add_argument("--lines", type=int, default=50)
    ap.add_argument("--serve", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--no-controllers", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    show_load()
    if args.serve:
        return serve(Path(args.serve), controllers=not args.no_controllers, lines=args.lines)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        (tmp / "submit").mkdir()
        (tmp / "fan").mkdir()
        bench_submit(tmp / "submit", args.repeat)
        bench_fan_in(tmp / "fan", args.fan_in, args.lines)


if __name__ == "__main__":
    main()
