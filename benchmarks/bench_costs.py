"""Costs: the supervisor's meter tick and the per-user total over many runs.

Run from the repository root::

    python benchmarks/bench_costs.py [--repeat 7] [--runs 2000]

Prints median times, with ratios against a baseline measured in the same run:

- ``check_budget`` (meter + cap decision, what the local supervisor does every 2 s) for a
  job of 1, 64 and 1024 nodes with 4 relaunches each, against the 1-node case;
- ``user_total`` over ``--runs`` run folders (``<exp>/runs/<id>/cost.json``), against
  reading and ``json.loads``-ing the same files with nothing else (the floor any total pays).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import median_ms, show_load  # noqa: E402
from jupyter_starverse._settings import Settings  # noqa: E402
from jupyter_starverse.costs import NodeInterval, check_budget, job_cost, load_price_table, write_cost  # noqa: E402
from jupyter_starverse.jobmodel import JobSpec  # noqa: E402

T0 = 1_796_000_000.0


def _intervals(nodes: int) -> list[NodeInterval]:
    out = []
    for n in range(nodes):
        for k in range(4):
            out.append(NodeInterval(n, T0 + 1000 * k, T0 + 1000 * k + 900))
        out.append(NodeInterval(n, T0 + 5000, None))
    return out


def bench_meter(repeat: int) -> None:
    table = load_price_table(Settings.from_env({"STARVERSE_HOME": tempfile.gettempdir()}))
    base = None
    print("check_budget (meter + cap decision, grace 27 s)")
    for nodes in (1, 64, 1024):
        spec = JobSpec(name="b", script="t.py", nodes=nodes, procs_per_node=8, accelerator="a100-80g", budget="1e6")
        ivs = _intervals(nodes)
        ms = median_ms(lambda s=spec, i=ivs: check_budget(s, i, table, now=T0 + 9000, grace=27), repeat)
        base = base or ms
        print(f"  {nodes:5d} nodes x 5 intervals: {ms:8.3f} ms  ({ms / base:6.1f}x the 1-node case)")


def bench_total(repeat: int, runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "experiments"
        table = load_price_table(Settings.from_env({"STARVERSE_HOME": tmp}))
        spec = JobSpec(name="b", script="t.py", procs_per_node=8, accelerator="rtx4090")
        files = []
        for i in range(runs):
            run = root / f"exp{i % 50}" / "runs" / f"run-{i}"
            (run / "logs").mkdir(parents=True)
            (run / "logs" / "rank0.log").write_text("x\n")
            user = "alice" if i % 2 else "bob"
            cost = job_cost(
                spec, [NodeInterval(0, T0, T0 + 3600 + i)], table, now=T0 + 7200, job_id=f"run-{i}", user=user
            )
            files.append(Path(write_cost(run, cost).path))

        def floor() -> None:
            for f in files:
                json.loads(f.read_text())

        from jupyter_starverse.costs import user_total

        result = user_total(root, "alice")
        assert len(result.records) == runs // 2 and result.amounts[0][1] > Decimal(0)
        base = median_ms(floor, repeat)
        ms = median_ms(lambda: user_total(root, "alice"), repeat)
        print(f"user_total over {runs} runs ({runs // 2} of the user's)")
        print(f"  read + json.loads only (baseline): {base:8.1f} ms")
        print(f"  user_total (walk, parse, validate, sum): {ms:8.1f} ms  ({ms / base:4.1f}x the baseline)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--runs", type=int, default=2000)
    args = parser.parse_args()
    show_load()
    bench_meter(args.repeat)
    bench_total(args.repeat, args.runs)


if __name__ == "__main__":
    main()
