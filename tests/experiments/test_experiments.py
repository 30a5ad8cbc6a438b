"""Experiment folders: layout, status, metrics (runtime records and plain logs), checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_starverse.errors import InvalidNameError, NotFoundError
from jupyter_starverse.experiments import (
    ExperimentPaths,
    NodeRecord,
    RunStatus,
    checkpoint_name,
    find_run,
    latest_checkpoint,
    list_checkpoints,
    list_runs,
    new_job_id,
    node_intervals,
    parse_log_metrics,
    plan_resume,
    progress,
    read_metrics,
    read_status,
    record_checkpoint,
    write_json,
    write_status,
)


def _run(root: Path, exp: str, job_id: str) -> Path:
    run = ExperimentPaths.of(root, exp).run(job_id)
    run.make()
    write_json(run.spec, {"name": exp})
    return run.root


def _ckpt(run_dir: Path, step: int, world: int, t: float, *, complete: bool = True) -> Path:
    d = run_dir / "checkpoints" / checkpoint_name(step)
    d.mkdir(parents=True)
    if complete:  # a finished save: DCP metadata, meta.json, then the run's own record of it
        (d / ".metadata").write_bytes(b"dcp metadata")
        (d / "meta.json").write_text(json.dumps({"step": step, "world_size": world, "time": t}))
        record_checkpoint(d, step=step, world_size=world, time=t)
    return d


def test_job_ids_are_unique_and_carry_the_name() -> None:
    ids = {new_job_id("train") for _ in range(50)}
    assert len(ids) == 50
    assert all(i.startswith("train-") for i in ids)


def test_find_and_list_runs(tmp_path: Path) -> None:
    a = _run(tmp_path, "exp-a", "a-1")
    b = _run(tmp_path, "exp-b", "b-1")
    assert find_run(tmp_path, "b-1").root == b
    assert {r.root for r in list_runs(tmp_path)} == {a, b}
    with pytest.raises(NotFoundError):
        find_run(tmp_path, "nope")
    with pytest.raises(InvalidNameError):
        find_run(tmp_path, "../escape")
    with pytest.raises(InvalidNameError):
        ExperimentPaths.of(tmp_path, "..")


def test_status_round_trip_and_node_intervals(tmp_path: Path) -> None:
    run = _run(tmp_path, "e", "j1")
    assert read_status(run) is None
    nodes = (
        NodeRecord(0, "running", pid=10, started=100.0, launches=((100.0, None),)),
        NodeRecord(1, "running", pid=11, started=100.0, launches=((100.0, 130.0), (140.0, None))),
    )
    status = RunStatus("j1", "running", created=99.0, started=100.0, nodes=nodes, port=1234)
    write_status(run, status)
    back = read_status(run)
    assert back == status
    assert not back.finished_state
    intervals = node_intervals(back)
    assert [(i.node, i.start, i.end) for i in intervals] == [(0, 100.0, None), (1, 100.0, 130.0), (1, 140.0, None)]
    done = back.with_node(NodeRecord(1, "succeeded", exit_code=0))
    assert done.nodes[1].state == "succeeded" and done.nodes[0] == nodes[0]


def test_metrics_from_jsonl_skip_torn_lines(tmp_path: Path) -> None:
    run = _run(tmp_path, "e", "j1")
    lines = [json.dumps({"step": s, "time": 1000.0 + s, "rank": 0, "loss": 3.0 - s / 10}) for s in range(5)]
    (run / "metrics.jsonl").write_text("\n".join(lines) + '\n{"step": 5, "ti')
    points = read_metrics(run)
    assert [p.step for p in points] == [0, 1, 2, 3, 4]
    assert points[-1].values == {"loss": pytest.approx(2.6)}
    prog = progress(points, total=10)
    assert prog.step == 4 and prog.steps_per_s == pytest.approx(1.0) and prog.eta_s == pytest.approx(5.0)
    assert prog.fraction == pytest.approx(0.5)


def test_metrics_fall_back_to_loss_lines_in_rank0_log(tmp_path: Path) -> None:
    run = _run(tmp_path, "e", "j1")
    (run / "logs" / "rank0.log").write_text("starting\nstep 0 loss 3.25\nepoch 1 step: 10, loss=2.5e-1\nloss: nan\n")
    points = read_metrics(run)
    assert [(p.step, p.values["loss"]) for p in points] == [(0, 3.25), (10, 0.25)]
    assert read_metrics(run, from_logs=False) == []
    assert [p.values["loss"] for p in parse_log_metrics("Loss 1.5\nloss 1.0")] == [1.5, 1.0]


def test_latest_checkpoint_ignores_incomplete_and_spans_runs(tmp_path: Path) -> None:
    r1 = _run(tmp_path, "e", "j1")
    r2 = _run(tmp_path, "e", "j2")
    _ckpt(r1, 9, 4, 100.0)
    _ckpt(r1, 19, 4, 200.0)
    _ckpt(r2, 29, 2, 300.0, complete=False)  # no meta.json: a save that died half-way
    exp = tmp_path / "e"
    assert [c.step for c in list_checkpoints(exp)] == [9, 19]
    latest = latest_checkpoint(exp)
    assert latest is not None and latest.step == 19 and latest.world_size == 4
    assert latest_checkpoint(r2) is None
    plan = plan_resume(exp, new_world_size=3)
    assert (plan.old_world_size, plan.new_world_size, plan.start_step, plan.reshard) == (4, 3, 20, True)
    assert "checkpoint step 19" in str(plan) and "4 -> 3" in str(plan)
    empty = plan_resume(tmp_path / "other", new_world_size=2)
    assert empty.checkpoint is None and empty.start_step == 0


def test_retention_never_deletes_the_newest_healthy_checkpoint(tmp_path: Path) -> None:
    run = _run(tmp_path, "e", "j1")
    dropped: list[Path] = []
    for step, healthy in [(0, True), (1, True), (2, True), (3, False), (4, False), (5, False)]:
        d = run / "checkpoints" / checkpoint_name(step)
        d.mkdir(parents=True)
        (d / ".metadata").write_bytes(b"dcp metadata")
        problem = None if healthy else "the loss was not finite (loss=nan) since step 3"
        dropped += record_checkpoint(
            d, step=step, world_size=1, time=float(step), keep=2, healthy=healthy, problem=problem
        )
    # keep=2 counts healthy checkpoints only: 1 and 2 stay; the newest 2 unhealthy ones stay beside them
    assert sorted(p.name for p in dropped) == [checkpoint_name(0), checkpoint_name(3)]
    assert [c.step for c in list_checkpoints(run)] == [1, 2]
    latest = latest_checkpoint(tmp_path / "e")
    assert latest is not None and latest.step == 2 and latest.healthy
    plan = plan_resume(tmp_path / "e", new_world_size=1)
    assert plan.start_step == 3
    assert [(i.step, i.reason) for i in plan.ignored if i.step in (4, 5)] == [
        (4, "unhealthy: the loss was not finite (loss=nan) since step 3"),
        (5, "unhealthy: the loss was not finite (loss=nan) since step 3"),
    ]
