"""Guards of money that leaks: a loss that stays NaN/inf, GPUs that stay idle."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from jupyter_starverse._settings import Settings
from jupyter_starverse.errors import BadInputError
from jupyter_starverse.runtime._guards import IdleTracker, LossGuard, NonFiniteLossError, gpu_utilisation


def test_a_loss_that_stays_nan_stops_after_k_steps_naming_them() -> None:
    guard = LossGuard(3)
    guard.observe(0, {"loss": 1.0})
    guard.observe(1, {"loss": math.nan})
    guard.observe(2, {"loss": 0.5})  # a finite loss in between starts the count again
    guard.observe(3, {"loss": math.nan, "lr": 0.1})
    guard.observe(4, {"train_loss": math.inf})
    with pytest.raises(NonFiniteLossError, match=r"3 logged steps in a row \(steps 3 to 5\)") as err:
        guard.observe(5, {"loss": math.nan})
    assert "STARVERSE_NAN_STEPS=3" in str(err.value) and "lower learning rate" in str(err.value)


def test_values_that_are_not_a_loss_and_a_zero_limit_never_stop() -> None:
    guard = LossGuard(2)
    for step in range(5):
        guard.observe(step, {"grad_norm": math.nan})
    off = LossGuard.from_env({"STARVERSE_NAN_STEPS": "0"})
    for step in range(5):
        off.observe(step, {"loss": math.nan})
    assert LossGuard.from_env({}).limit == 3


def test_idle_tracker_warns_then_stops_and_any_activity_resets_it() -> None:
    t = IdleTracker(minutes=10, warn_minutes=2)
    assert t.observe(0, 0.0) == "ok"
    assert t.observe(7 * 60, 1.0) == "ok"
    assert t.observe(8 * 60, 0.0) == "warn"
    assert t.observe(9 * 60, None) == "warn"  # no reading: the stretch goes on
    assert t.observe(9.5 * 60, 0.0, busy=True) == "ok"  # a running cell or step ends it
    assert t.observe(10 * 60, 0.0) == "ok" and t.observe(20 * 60, 2.0) == "stop"
    assert t.idle_minutes(20 * 60) == 10
    assert t.observe(21 * 60, 80.0) == "ok" and t.idle_since is None
    assert IdleTracker(minutes=0).observe(10**6, 0.0) == "ok"  # off
    assert IdleTracker(minutes=1).observe(0, None) == "ok"  # never read: never idle


def test_gpu_utilisation_from_an_injected_source(tmp_path: Path) -> None:
    source = tmp_path / "util"
    source.write_text("42.5\n")
    assert gpu_utilisation(environ={"STARVERSE_GPU_UTIL_FILE": str(source)}) == 42.5
    source.write_text("n/a")
    assert gpu_utilisation(environ={"STARVERSE_GPU_UTIL_FILE": str(source)}) is None
    assert gpu_utilisation(environ={"STARVERSE_GPU_UTIL_FILE": str(tmp_path / "missing")}) is None


def test_idle_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STARVERSE_JOB_IDLE_MINUTES", "0")
    monkeypatch.setenv("STARVERSE_WORKSPACE_IDLE_MINUTES", "0.5")
    s = Settings.from_env()
    assert (s.job_idle_minutes, s.workspace_idle_minutes, s.nan_steps) == (0.0, 0.5, 3)
    assert Settings.from_env(s.to_env()).workspace_idle_minutes == 0.5
    monkeypatch.setenv("STARVERSE_JOB_IDLE_MINUTES", "soon")
    with pytest.raises(BadInputError, match="STARVERSE_JOB_IDLE_MINUTES"):
        Settings.from_env()
