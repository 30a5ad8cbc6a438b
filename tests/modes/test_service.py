"""ModeService without a kernel: targets, plans, prices, the pull guard, saved states."""

from __future__ import annotations

import pickle
import threading

import pytest

from jupyter_starverse._settings import Settings
from jupyter_starverse.catalog import Catalog
from jupyter_starverse.catalog._progress import ProgressTracker
from jupyter_starverse.client import Starverse
from jupyter_starverse.errors import BadInputError, ConflictError, NotFoundError, StoreError
from jupyter_starverse.modes import Mode, ModeService, detect_workspace, kernel_env, restore_namespace, save_namespace
from jupyter_starverse.modes._kernelstate import discard_state, list_states


def test_mode_round_trips_and_rejects_nonsense(settings: Settings) -> None:
    service = ModeService(settings)
    assert service.current() == Mode("gpu", "a100-80g", 1)  # STARVERSE_MODE=gpu in the fixture
    service.record(Mode("cpu"))
    assert ModeService(settings).current() == Mode("cpu")  # another process sees it
    assert Starverse(settings).info().mode == "cpu"
    assert Mode.from_json({"kind": "GPU", "gpu_type": "H100-80G", "gpus": "2"}) == Mode("gpu", "h100-80g", 2)
    with pytest.raises(BadInputError, match="not one of cpu, gpu"):
        service.target("tpu")
    with pytest.raises(BadInputError, match="--gpu only goes with gpu mode"):
        service.target("cpu", gpu_type="a100-80g")
    with pytest.raises(BadInputError, match="at least one GPU"):
        service.target("gpu", gpus=0)
    with pytest.raises(BadInputError, match="whole number"):
        Mode.from_json({"kind": "gpu", "gpu_type": "a100-80g", "gpus": "two"})
    service.path.write_text("{not json")
    with pytest.raises(StoreError, match="cannot read the mode file") as err:
        service.current()
    assert "delete it" in str(err.value)


def test_target_remembers_the_last_gpu(settings: Settings) -> None:
    service = ModeService(settings)
    service.record(Mode("gpu", "h100-80g", 4))
    assert service.target("gpu") == Mode("gpu", "h100-80g", 4)
    service.record(Mode("cpu"))
    assert service.target("gpu") == Mode("gpu", "a100-80g", 1)  # the configured default
    assert service.target("gpu", gpu_type="L40S", gpus=2) == Mode("gpu", "l40s", 2)


def test_plan_shows_the_price_difference(settings: Settings) -> None:
    service = ModeService(settings)
    plan = service.plan("cpu")
    assert plan.changes and plan.where == "local"
    assert plan.price.to_json() == {
        "currency": "CNY", "before_per_hour": "6.5", "after_per_hour": "0.1", "difference_per_hour": "-6.4",
    }
    assert "-6.40 CNY/h" in str(plan)
    assert service.plan("gpu", gpus=2).price.difference == 6.5  # two cards instead of one
    assert not service.plan("gpu").changes
    with pytest.raises(BadInputError, match="no price for GPU type 'b300'") as err:
        service.plan("gpu", gpu_type="b300")
    assert "known types" in str(err.value)
    assert service.current() == Mode("gpu", "a100-80g", 1)


def test_switch_is_refused_while_a_pull_runs(settings: Settings) -> None:
    catalog = Catalog(settings)
    tracker = ProgressTracker("ds/corpus@1", catalog.layout.progress_path("ds.corpus@1"), None)
    tracker.start(bytes_total=1000, files_total=2)
    tracker.set_done_bytes(250)
    tracker.emit(force=True)
    service = ModeService(settings)
    with pytest.raises(ConflictError, match=r"a pull is running: ds/corpus@1 \(25%\)") as err:
        service.switch("cpu")
    assert "--force" in str(err.value)
    assert service.current() == Mode("gpu", "a100-80g", 1)
    forced = service.switch("cpu", force=True)
    assert forced.plan.warnings and "ds/corpus@1" in forced.plan.warnings[0]
    tracker.set_phase("done")
    assert service.switch("gpu").plan.warnings == ()


def test_kernel_env_hides_and_restores_gpus() -> None:
    base = {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0,1"}
    cpu = kernel_env(Mode("cpu"), base)
    assert cpu["CUDA_VISIBLE_DEVICES"] == "" and cpu["PATH"] == "/bin"
    assert kernel_env(Mode("cpu"), cpu) == cpu  # switching twice keeps the original value
    assert kernel_env(Mode("gpu", "a100-80g", 1), cpu) == base
    assert "CUDA_VISIBLE_DEVICES" not in kernel_env(Mode("gpu", "a100-80g", 1), kernel_env(Mode("cpu"), {}))
    assert detect_workspace({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}) == "kubernetes"
    assert detect_workspace({}) == "local"


class _Unpicklable:
    def __init__(self) -> None:
        self.lock = threading.Lock()


def test_save_reports_what_cannot_be_kept(settings: Settings, tmp_path: object) -> None:
    import io

    ns: dict[str, object] = {
        "x": 42,
        "rows": [{"a": 1}, {"a": 2}],
        "lock_holder": _Unpicklable(),  # class importable, instance not picklable
        "buf": io.StringIO("text"),
        "gen": (i for i in range(3)),
        "pickle": pickle,
        "_hidden": 1,
        "In": [],
    }
    state = save_namespace(ns, home=settings.home, from_mode="gpu", to_mode="cpu", kernel_id="k1")
    assert state.names == ("x", "rows")
    assert state.not_kept["lock_holder"].startswith("cannot be pickled: TypeError")
    assert "lock" in state.not_kept["lock_holder"]
    assert state.not_kept["buf"].startswith("open file handle")
    assert state.not_kept["gen"].startswith("generator")
    assert state.not_kept["pickle"].startswith("module")
    assert "_hidden" not in state.not_kept and "In" not in state.not_kept
    assert [s.id for s in list_states(settings.home)] == [state.id]

    fresh: dict[str, object] = {}
    report = restore_namespace(fresh, home=settings.home)
    assert fresh == {"x": 42, "rows": [{"a": 1}, {"a": 2}]}
    assert report.not_kept == state.not_kept
    assert list_states(settings.home) == []
    with pytest.raises(NotFoundError, match="no saved kernel state"):
        restore_namespace({}, home=settings.home)


def test_state_with_a_broken_variable_stays_on_disk(settings: Settings) -> None:
    big = bytes(range(256)) * 2048  # 512 KB: stored in a file of its own, small values share one
    state = save_namespace({"x": 1, "y": big}, home=settings.home)
    manifest_dir = list_states(settings.home)[0].path
    # The file of y is damaged on disk (disk error, truncated copy).
    import json
    from pathlib import Path

    files = json.loads((Path(manifest_dir) / "manifest.json").read_text())["files"]
    (Path(manifest_dir) / "vars" / files["y"]["file"]).write_bytes(b"garbage")
    ns: dict[str, object] = {}
    report = restore_namespace(ns, home=settings.home, state_id=state.id)
    assert ns == {"x": 1} and report.restored == ("x",)
    assert "y" in report.failed
    assert report.kept_on_disk == state.path and Path(state.path).is_dir()
    discard_state(settings.home, state.id)
    assert list_states(settings.home) == []
    with pytest.raises(BadInputError, match="not a valid state id"):
        save_namespace({}, home=settings.home, state_id="../../etc")
