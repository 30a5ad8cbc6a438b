"""Monitor: what one poll of the live job monitor costs, as the run grows.

Run from the repository root::

    python benchmarks/bench_monitor.py [--repeat 9] [--records 1000,10000,50000]

Launches one tiny real job (local backend, 1 node x 2 processes), then grows its
``metrics.jsonl`` and rank logs to each size and prints the median time of:

- ``JobMonitor.refresh()`` (job state, metrics, per-rank records, cost meter, log tail,
  chart and tables rendered into the widgets), against
- the floor: ``backend.get`` + ``read_metrics`` + reading the logs once, with nothing else.

A poll runs every second in a background thread; the ratio says what the summary,
cost meter and rendering add on top of reading the run folder.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import show_load  # noqa: E402
from jupyter_starverse._api import launch  # noqa: E402
from jupyter_starverse._settings import Settings  # noqa: E402
from jupyter_starverse.experiments import RunPaths, read_metrics  # noqa: E402

SCRIPT = "from jupyter_starverse import runtime as sv\nsv.log_metrics(0, loss=3.0)\nprint('step 0 loss 3.0')\n"


def _median(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--records", default="1000,10000,50000")
    opts = parser.parse_args()
    show_load()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory() as home:
        settings = Settings.from_env({"STARVERSE_HOME": home, "STARVERSE_MODE": "cpu"})
        handle = launch(code=SCRIPT, name="bench", procs=2, settings=settings)
        job = handle.wait(timeout=600)
        assert job.state.value == "succeeded", job.reason
        run = RunPaths(Path(job.experiment_dir))
        monitor = handle.monitor(start=False)
        backend = handle.backend
        written = 1
        print(f"{'records':>8} {'log lines':>9} {'refresh ms':>11} {'floor ms':>9} {'ratio':>6}")
        for size in (int(s) for s in opts.records.split(",")):
            with run.metrics.open("a") as m, run.rank_log(0).open("a") as l0, run.rank_log(1).open("a") as l1:
                for step in range(written, size):
                    m.write(json.dumps({"step": step, "time": 1e9 + step, "rank": 0, "loss": 3.0 / (step + 1)}) + "\n")
                    l0.write(f"step {step} loss {3.0 / (step + 1):.4f}\n")
                    l1.write(f"step {step}\n")
            written = size

            def floor() -> None:
                backend.get(job.id)
                read_metrics(run)
                for _ in backend.logs(job.id):
                    pass

            refresh = _median(monitor.refresh, opts.repeat)
            base = _median(floor, opts.repeat)
            print(f"{size:>8} {2 * size:>9} {refresh * 1e3:>11.1f} {base * 1e3:>9.1f} {refresh / base:>6.2f}")
        monitor.close()


if __name__ == "__main__":
    main()
