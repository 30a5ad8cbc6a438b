"""The batch script's restart keeper, without a cluster: what it decides from the run folder."""

from __future__ import annotations

import json
import time
from pathlib import Path

from jupyter_starverse.backends.slurm._requeue import main, read_restarts
from jupyter_starverse.experiments import RunPaths, write_json


def _run(tmp_path: Path) -> RunPaths:
    run = RunPaths(tmp_path / "run")
    run.root.mkdir(parents=True)
    return run


def _end(
    run: RunPaths, attempt: int, rc: int, *, stopping: bool = False, max_restarts: int = 0, preempt: int = 3
) -> int:
    argv = ["end", str(run.root), str(attempt), str(rc), "1" if stopping else "0", str(time.time() - 5),
            str(max_restarts), str(preempt)]  # fmt: skip
    return main(argv)


def test_a_sigterm_stop_is_requeued_until_the_preemption_budget_is_spent(tmp_path: Path) -> None:
    run = _run(tmp_path)
    for attempt in range(3):
        write_json(run.stops / "rank1.json", {"rank": 1, "node": 1, "signalled": time.time(), "step": 7})
        assert _end(run, attempt, 1, preempt=2) == (0 if attempt < 2 else 1)  # 0: requeue
        if attempt < 2:
            assert (run.stops / f"attempt-{attempt}" / "rank1.json").is_file()  # kept apart
    kept = read_restarts(run)
    assert (kept["preemptions"], kept["failures"]) == (2, 0)
    assert [e["action"] for e in kept["events"]] == ["resumed", "resumed", "final"]
    assert "rank 1 (node 1) got SIGTERM" in kept["events"][0]["cause"]
    assert "no restarts left (preemption budget 2/2 used)" in kept["final_reason"]


def test_failures_spend_max_restarts_and_success_or_cancel_is_final(tmp_path: Path) -> None:
    run = _run(tmp_path)
    write_json(run.errors / "rank0.json", {"rank": 0, "node": 0, "time": time.time(), "error": "ValueError: bad batch"})
    assert _end(run, 0, 1, max_restarts=1) == 0
    assert _end(run, 1, 1, max_restarts=1) == 1
    kept = read_restarts(run)
    assert kept["failures"] == 1 and "max_restarts=1 used" in kept["final_reason"]
    assert "ValueError: bad batch" in kept["events"][0]["cause"]
    other = _run(tmp_path / "b")
    assert _end(other, 0, 0) == 1 and read_restarts(other)["events"] == []  # success: nothing to requeue
    assert _end(other, 0, 2, max_restarts=5) == 1  # a usage error is never retried
    write_json(other.cancel, {"reason": "cancelled by user"})
    assert _end(other, 0, 1, stopping=True) == 1  # cancel is final


def test_a_requeue_slurm_made_itself_spends_the_preemption_budget(tmp_path: Path) -> None:
    run = _run(tmp_path)
    assert main(["begin", str(run.root), "0", "1"]) == 0
    assert main(["begin", str(run.root), "1", "1"]) == 0  # a lost node: Slurm requeued the job
    assert main(["begin", str(run.root), "2", "1"]) == 1  # again: the budget of 1 is spent
    kept = json.loads((run.root / "restarts.json").read_text())
    assert [e["kind"] for e in kept["events"]] == ["lost", "lost"]
    assert "no restarts left" in kept["final_reason"]
    assert main(["begin", str(run.root)]) == 2  # usage
