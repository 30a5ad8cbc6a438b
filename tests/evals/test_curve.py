"""Reference curves: the shipped file names its source, and a run departing from it is warned about."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_starverse.cli import main
from jupyter_starverse.client import Starverse
from jupyter_starverse.errors import BadInputError, NotFoundError
from jupyter_starverse.evals import ReferenceCurve
from jupyter_starverse.experiments import RunPaths


def test_shipped_curve_names_its_source_and_says_what_it_is() -> None:
    curve = ReferenceCurve.load("cogvlm-stage1")
    assert curve.kind == "published-endpoints" and "3.81 to 2.05" in curve.source  # the article's two figures
    assert curve.points == ((0.0, 3.81), (1.0, 2.05)) and curve.at(0.5) == pytest.approx(2.93)
    assert curve.at(1.5) is None  # never extrapolated
    with pytest.raises(NotFoundError, match="no reference curve"):
        ReferenceCurve.load("no-such-recipe")


def test_a_run_departing_from_its_reference_is_warned(
    client: Starverse, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    paths = RunPaths(run)
    paths.metrics.parent.mkdir(parents=True, exist_ok=True)
    losses = [3.80, 3.40, 3.05, 2.70, 3.60]  # on the reference until step 40, then far above it
    paths.metrics.write_text("".join(json.dumps({"step": 10 * i, "loss": v}) + "\n" for i, v in enumerate(losses)))
    check = client.evals.curve(run, "cogvlm-stage1")
    assert check.compared == 5 and [d.step for d in check.departures] == [40]
    assert check.departures[0].reference == pytest.approx(2.05) and check.departures[0].gap > 0.15
    assert "departs from the reference" in check.warnings[0] and "published-endpoints" in check.warnings[0]
    assert main(["eval", "curve", str(run), "--reference", "cogvlm-stage1", "--tolerance", "0.9"]) == 0
    assert "0 beyond 90%" in capsys.readouterr().out
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"kind": "made-up", "x": "step", "points": [[0, 1], [1, 2]]}))
    with pytest.raises(BadInputError, match="source"):
        ReferenceCurve.load(bad)


def test_the_job_warns_when_its_loss_leaves_the_reference(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str], client: Starverse
) -> None:
    from jupyter_starverse.runtime import _env, _metrics, close_metrics, log_metrics

    monkeypatch.setenv("STARVERSE_EXPERIMENT_DIR", str(tmp_path))
    monkeypatch.setenv("STARVERSE_STEPS", "4")
    monkeypatch.setenv("STARVERSE_REFERENCE_CURVE", "cogvlm-stage1")
    _env.job_env.cache_clear()
    try:
        for step, loss in ((1, 3.4), (2, 3.9), (3, 3.8), (4, 2.1)):  # on it, off it (twice), back
            log_metrics(step, loss=loss)
    finally:
        close_metrics()
        _env.job_env.cache_clear()
    err = capsys.readouterr().err
    assert err.count("warning: reference curve: step 2: loss 3.900 departs") == 1 and "step 3" not in err
    assert "step 4: loss 2.100 is back within 15%" in err
    assert _metrics._sinks == {}


def test_a_small_run_is_drawn_beside_the_full_size_curve_not_held_against_it(
    client: Starverse, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from jupyter_starverse.recipes import SMALL_VLM_MODEL

    losses = [3.80, 3.40, 3.05, 2.70, 3.60]  # step 40 departs, as in the full-size test above
    runs = {}
    for name, mounts in (("small", [SMALL_VLM_MODEL, "image-text-tiny@v1"]), ("full", ["hf:THUDM/cogvlm-chat-hf"])):
        run = tmp_path / name
        paths = RunPaths(run)
        paths.metrics.parent.mkdir(parents=True, exist_ok=True)
        paths.metrics.write_text("".join(json.dumps({"step": 10 * i, "loss": v}) + "\n" for i, v in enumerate(losses)))
        (run / "spec.json").write_text(json.dumps({"name": name, "mounts": mounts, "env": {}}))
        runs[name] = run
    small = client.evals.curve(runs["small"], "cogvlm-stage1")
    assert not small.held and small.warnings == [] and [d.step for d in small.departures] == [40]
    assert "not held against it" in str(small) and small.to_json()["held"] is False
    full = client.evals.curve(runs["full"], "cogvlm-stage1")
    assert full.held and len(full.warnings) == 1
    assert not client.evals.curve(runs["full"], "cogvlm-stage1", small=True).held  # told, not guessed
    assert main(["eval", "curve", str(runs["small"]), "--reference", "cogvlm-stage1"]) == 0
    out = capsys.readouterr().out
    assert "not held against it" in out and "departs from the reference" not in out


def test_a_small_job_says_once_that_the_curve_is_not_held_and_never_warns(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str], client: Starverse
) -> None:
    from jupyter_starverse.runtime import _env, close_metrics, log_metrics

    monkeypatch.setenv("STARVERSE_EXPERIMENT_DIR", str(tmp_path))
    monkeypatch.setenv("STARVERSE_STEPS", "4")
    monkeypatch.setenv("STARVERSE_REFERENCE_CURVE", "cogvlm-stage1")
    monkeypatch.setenv("STARVERSE_REFERENCE_CHECK", "draw")
    _env.job_env.cache_clear()
    try:
        for step, loss in ((1, 3.4), (2, 3.9), (3, 3.8), (4, 2.1)):  # the departures the test above warns about
            log_metrics(step, loss=loss)
    finally:
        close_metrics()
        _env.job_env.cache_clear()
    err = capsys.readouterr().err
    assert "warning: reference curve" not in err and "is back within" not in err
    assert err.count("not held against it") == 1
