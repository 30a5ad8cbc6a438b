"""Log lines carry the node their rank really ran on (torchrun assigns ranks by rendezvous order)."""

from __future__ import annotations

import json
from pathlib import Path

from jupyter_starverse.experiments import RunPaths
from jupyter_starverse.watch import follow_logs


def test_a_rank_is_attributed_to_the_node_its_worker_recorded(tmp_path: Path) -> None:
    run = RunPaths(tmp_path / "exp" / "runs" / "job-1")
    run.rank_log(0).parent.mkdir(parents=True)
    run.pids.mkdir(parents=True)
    run.rank_log(0).write_text("loss 1.0\n")
    run.rank_log(1).write_text("loss 2.0\n")
    # 2 nodes x 1 process, but node 1 won the rendezvous: it got rank 0.
    (run.pids / "rank0.json").write_text(json.dumps({"rank": 0, "node": 1, "pid": 11}))
    (run.pids / "rank1.json").write_text(json.dumps({"rank": 1, "node": 0, "pid": 12}))
    lines = [
        line
        for line in follow_logs(run, world_size=2, nodes=2, rank=None, follow=False, finished=lambda: True)
        if line.rank is not None
    ]
    assert [(line.rank, line.node, line.text) for line in lines] == [(0, 1, "loss 1.0"), (1, 0, "loss 2.0")]


def test_without_a_pid_file_the_node_is_guessed_from_the_rank(tmp_path: Path) -> None:
    run = RunPaths(tmp_path / "exp" / "runs" / "job-2")
    run.rank_log(3).parent.mkdir(parents=True)
    run.rank_log(3).write_text("hello\n")
    [line] = follow_logs(run, world_size=4, nodes=2, rank=3, follow=False, finished=lambda: True)
    assert (line.node, line.rank) == (1, 3)
