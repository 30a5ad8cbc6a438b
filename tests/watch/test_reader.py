from __future__ import annotations

import json
from pathlib import Path

from jupyter_starverse.jobmodel import Job, JobSpec, JobState
from jupyter_starverse.watch._progress import RankRecord
from jupyter_starverse.watch._reader import MetricsFollower, last_lines, tail_run_logs


def _job(run: Path, *, nodes: int = 1, procs: int = 2) -> Job:
    spec = JobSpec(name="r", code="print(1)", nodes=nodes, procs_per_node=procs)
    return Job("r-1", "local", spec, JobState.RUNNING, str(run), 0.0)


def test_last_lines(tmp_path: Path) -> None:
    f = tmp_path / "log"
    assert last_lines(f, 3) == []
    f.write_text("".join(f"line {i}\n" for i in range(100_000)))  # > one read chunk
    assert last_lines(f, 3) == ["line 99997", "line 99998", "line 99999"]
    assert last_lines(f, 0) == []
    with f.open("a") as out:
        out.write("partial\r")  # a line still being written counts as the last one
    assert last_lines(f, 2) == ["line 99999", "partial"]
    (tmp_path / "short").write_text("a\nb\n")
    assert last_lines(tmp_path / "short", 10) == ["a", "b"]
    long_line = tmp_path / "long"
    long_line.write_text("x" * 300_000 + "\nend\n")  # a line longer than the first chunk
    assert last_lines(long_line, 2) == ["x" * 300_000, "end"]


def test_metrics_follower_reads_only_what_was_appended(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    job = _job(run)
    follower = MetricsFollower()
    assert follower.read(job) == []
    (run / "logs").mkdir()
    (run / "logs" / "rank0.log").write_text("step 3 loss 1.5\n")
    assert [(p.step, p.values["loss"]) for p in follower.read(job)] == [(3, 1.5)]  # log fallback

    metrics = run / "metrics.jsonl"
    with metrics.open("w") as f:
        f.write(json.dumps({"step": 0, "time": 1.0, "rank": 0, "loss": 2.0}) + "\n")
        f.write('{"step": 1, "ti')  # half a line: not yet a record
    assert [p.step for p in follower.read(job)] == [0]
    with metrics.open("a") as f:
        f.write('me": 2.0, "rank": 0, "loss": 1.0}\nnot json\n' + json.dumps({"step": 2, "rank": 1, "acc": 0.5}) + "\n")
    points = follower.read(job)
    assert [(p.step, p.rank) for p in points] == [(0, 0), (1, 0), (2, 1)]
    assert points[1].time == 2.0 and points[1].values == {"loss": 1.0}

    metrics.write_text(json.dumps({"step": 7, "loss": 0.1}) + "\n")  # rewritten, shorter: start over
    assert [p.step for p in follower.read(job)] == [7]


def test_tail_run_logs(tmp_path: Path) -> None:
    run = tmp_path / "run"
    job = _job(run, nodes=2, procs=1)
    assert tail_run_logs(job, [], lines=10) is None
    logs = run / "logs"
    logs.mkdir(parents=True)
    (logs / "rank0.log").write_text("".join(f"r0 {i}\n" for i in range(10)))
    (logs / "rank1.log").write_text("r1 only\n")
    (logs / "node1.log").write_text("agent a\nagent b\nagent c\n")
    # rank 0 ran on node 1 (torchrun's choice): the records say so
    ranks = [RankRecord(rank=0, node=1, local_rank=0), RankRecord(rank=1, node=0, local_rank=0)]
    out = tail_run_logs(job, ranks, lines=8)
    assert out is not None
    assert [ln.render() for ln in out] == [
        "[0] r0 6",
        "[0] r0 7",
        "[0] r0 8",
        "[0] r0 9",
        "[1] r1 only",
        "[node1] agent b",
        "[node1] agent c",
    ]
    assert out[0].node == 1 and out[4].node == 0
    one = tail_run_logs(job, ranks, lines=2, rank=1)
    assert one is not None and [ln.render() for ln in one] == ["[1] r1 only"]
