"""Resume loads only checkpoints signed by a run whose secret we can read: planted DCP folders are never unpickled.

Loading a torch distributed checkpoint unpickles its ``.metadata``; in a shared experiments
folder anybody can create ``runs/<x>/checkpoints/step-99999999``. These tests plant such a
folder whose ``.metadata`` would create a marker file when unpickled.
"""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_starverse import runtime as sv
from jupyter_starverse.errors import PermissionDeniedError
from jupyter_starverse.experiments import (
    CHECKPOINT_INDEX,
    ExperimentPaths,
    checkpoint_name,
    list_checkpoints,
    plan_resume,
    record_checkpoint,
    write_json,
)
from jupyter_starverse.runtime import _dist
from jupyter_starverse.runtime._metrics import close_metrics
from tests.runtime._jobenv import as_job

torch = pytest.importorskip("torch")

OTHER_UID = 65534  # nobody


class _Payload:
    """Unpickling it opens (creates) ``marker``: what a planted ``.metadata`` could do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (str(self.marker), "w"))


@pytest.fixture
def exp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ExperimentPaths]:
    """An experiment with one run of ours that saved real DCP checkpoints after steps 4 and 9."""
    exp = ExperimentPaths.of(tmp_path, "e")
    own = exp.run("own")
    own.make()
    write_json(own.spec, {"name": "e"})
    as_job(monkeypatch, own.root)
    model = torch.nn.Linear(3, 2)
    for step in (4, 9):
        sv.save_checkpoint(step, model=model, keep=2)
    yield exp
    close_metrics()
    sv.job_env.cache_clear()
    _dist._CONTEXT.clear()


def _plant(exp: ExperimentPaths, marker: Path, *, run: str = "planted", forge_record: bool = False) -> Path:
    """A newer-looking checkpoint in another run folder; optionally with a forged record of it."""
    root = exp.run(run).root
    root.mkdir(parents=True)
    write_json(root / "spec.json", {"name": "e"})
    d = root / "checkpoints" / checkpoint_name(99999999)
    d.mkdir(parents=True)
    payload = pickle.dumps(_Payload(marker))
    (d / ".metadata").write_bytes(payload)
    (d / "meta.json").write_text(json.dumps({"step": 99999999, "world_size": 1, "time": 4e12, "job_id": run}))
    if forge_record:  # signed with a secret of the planter's own, through the project's own code
        record_checkpoint(d, step=99999999, world_size=1, time=4e12, job_id=run)
    return d


def _chown_tree(root: Path, uid: int) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            os.chown(Path(dirpath) / name, uid, -1, follow_symlinks=False)
    os.chown(root, uid, -1)


def _resume_new_run(exp: ExperimentPaths, monkeypatch: pytest.MonkeyPatch) -> tuple[int, Path]:
    """What ``--resume`` does: plan, then a new run's ranks load from the planned checkpoint."""
    plan = plan_resume(exp, new_world_size=1)
    assert plan.checkpoint is not None
    new = exp.run("new")
    new.make()
    write_json(new.spec, {"name": "e"})
    as_job(monkeypatch, new.root, resume_from=plan.checkpoint.path)
    return sv.load_latest(model=torch.nn.Linear(3, 2)), plan.checkpoint.path


def test_planted_checkpoint_is_ignored_and_never_unpickled(
    exp: ExperimentPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "PWNED"
    planted = _plant(exp, marker)
    plan = plan_resume(exp, new_world_size=1)
    assert plan.checkpoint is not None and plan.checkpoint.step == 9
    assert plan.checkpoint.path == exp.run("own").checkpoints / checkpoint_name(9)
    assert [(i.path, i.step) for i in plan.ignored] == [(planted, 99999999)]
    assert "its run has no secret" in plan.ignored[0].reason
    assert str(planted) in str(plan) and plan.to_json()["ignored"][0]["path"] == str(planted)

    start, chosen = _resume_new_run(exp, monkeypatch)
    assert start == 10 and chosen.parent.parent.name == "own"
    out = capsys.readouterr().out
    assert f"resume: ignored checkpoint {planted}" in out and "resumed from step-00000009" in out
    assert not marker.exists()


def test_explicitly_named_planted_checkpoint_is_refused(
    exp: ExperimentPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "PWNED"
    planted = _plant(exp, marker)
    as_job(monkeypatch, exp.run("new").root, resume_from=planted)
    with pytest.raises(PermissionDeniedError) as err:
        sv.load_latest(model=torch.nn.Linear(3, 2))
    assert str(planted) in str(err.value) and err.value.hint
    assert not marker.exists()


def test_checkpoint_missing_from_its_runs_record_is_ignored(
    exp: ExperimentPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = exp.run("own").checkpoints
    index = json.loads((own / CHECKPOINT_INDEX).read_text())
    assert [c["name"] for c in index["checkpoints"]] == [checkpoint_name(4), checkpoint_name(9)]
    index["checkpoints"] = index["checkpoints"][:1]  # step 9 is on disk but not in the run's record
    write_json(own / CHECKPOINT_INDEX, index)
    assert [c.step for c in list_checkpoints(exp)] == [4]
    plan = plan_resume(exp, new_world_size=1)
    assert plan.checkpoint is not None and plan.checkpoint.step == 4
    assert [i.path.name for i in plan.ignored] == [checkpoint_name(9)]
    start, _ = _resume_new_run(exp, monkeypatch)
    assert start == 5


def test_tampered_metadata_is_ignored(exp: ExperimentPaths, tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    meta = exp.run("own").checkpoints / checkpoint_name(9) / ".metadata"
    meta.write_bytes(pickle.dumps(_Payload(marker)))
    plan = plan_resume(exp, new_world_size=1)
    assert plan.checkpoint is not None and plan.checkpoint.step == 4
    assert "not the one the run recorded" in plan.ignored[0].reason
    assert not marker.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown a folder to another uid (65534)")
def test_checkpoint_owned_by_another_uid_is_ignored_even_with_a_forged_record(
    exp: ExperimentPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "PWNED"
    planted = _plant(exp, marker, forge_record=True)
    _chown_tree(planted.parent.parent, OTHER_UID)
    plan = plan_resume(exp, new_world_size=1)
    assert plan.checkpoint is not None and plan.checkpoint.step == 9
    assert [i.path for i in plan.ignored] == [planted]
    assert f"its run's secret belongs to uid {OTHER_UID}" in plan.ignored[0].reason
    start, _ = _resume_new_run(exp, monkeypatch)
    assert start == 10 and f"ignored checkpoint {planted}" in capsys.readouterr().out
    assert not marker.exists()

    # a foreign checkpoint folder inside a run folder of ours is refused as well
    as_job(monkeypatch, exp.run("new").root, resume_from=planted)
    with pytest.raises(PermissionDeniedError, match=str(planted)):
        sv.load_latest(model=torch.nn.Linear(3, 2))
    assert not marker.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown a folder to another uid (65534)")
def test_foreign_checkpoint_folder_inside_our_run_is_ignored(exp: ExperimentPaths, tmp_path: Path) -> None:
    step9 = exp.run("own").checkpoints / checkpoint_name(9)
    _chown_tree(step9, OTHER_UID)
    plan = plan_resume(exp, new_world_size=1)
    assert plan.checkpoint is not None and plan.checkpoint.step == 4
    assert plan.ignored[0].path == step9 and f"uid {OTHER_UID}" in plan.ignored[0].reason


def test_group_writable_checkpoint_is_ignored(exp: ExperimentPaths) -> None:
    step9 = exp.run("own").checkpoints / checkpoint_name(9)
    assert not step9.stat().st_mode & 0o022  # the save made it private to this user
    step9.chmod(0o777)
    plan = plan_resume(exp, new_world_size=1)
    assert plan.checkpoint is not None and plan.checkpoint.step == 4
    assert "writable by group or others" in plan.ignored[0].reason


def test_symlinked_checkpoint_folder_is_ignored(exp: ExperimentPaths) -> None:
    own = exp.run("own").checkpoints
    (own / checkpoint_name(9)).rename(own / "elsewhere")
    (own / checkpoint_name(9)).symlink_to(own / "elsewhere")
    plan = plan_resume(exp, new_world_size=1)
    assert plan.checkpoint is not None and plan.checkpoint.step == 4
    assert "symbolic link" in plan.ignored[0].reason
