from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

from jupyter_starverse._api import launch
from jupyter_starverse._settings import Settings
from jupyter_starverse.jobmodel import JobState
from jupyter_starverse.widgets.monitor import JobMonitor

from ._jobs import QUICK, quick_job, slow_job


def _until(condition, timeout: float = 120.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.2)


def test_monitor_of_a_finished_job_then_its_folder_vanishes(settings: Settings) -> None:
    handle = quick_job(settings)
    monitor = handle.monitor(start=False)
    assert isinstance(monitor, JobMonitor)
    progress = monitor.refresh()
    assert progress.state is JobState.SUCCEEDED
    assert progress.step == 4 and progress.total_steps == 5
    assert progress.points == ((0, 2.0), (1, 1.0), (2, 2.0 / 3), (3, 0.5), (4, 0.4))
    assert progress.steps_per_s is not None and progress.steps_per_s > 0
    assert monitor.bar.value == 1.0 and monitor.bar.bar_style == "success"
    assert handle.id in monitor.title.value and "succeeded" in monitor.title.value
    assert "<polyline" in monitor.chart.value and "starverse-reference" not in monitor.chart.value  # no reference
    assert "[0] step 4 loss 0.400" in monitor.logs.value
    assert "<b>step 5/5</b>" in monitor.stats.value
    assert "cost " in monitor.stats.value
    assert "rank 0" in monitor.ranks.value
    assert monitor.cancel_button.disabled
    assert monitor.error.layout.display == "none" and monitor.errors == []

    # the poller surfaces errors in the widget and keeps going; it never swallows them
    shutil.rmtree(Path(handle.experiment_dir))
    monitor.interval = 0.05
    monitor.start()
    _until(lambda: len(monitor.errors) >= 2)
    assert monitor.polling
    monitor.stop()
    assert not monitor.polling
    assert monitor.errors[0].startswith("NotFoundError: no job")
    assert monitor.error.layout.display == ""
    assert "NotFoundError" in monitor.error.value
    monitor.close()


def test_monitor_polls_a_running_job_and_its_cancel_button_stops_it(settings: Settings) -> None:
    handle = slow_job(settings)
    monitor = handle.monitor(interval=0.2)
    assert monitor.polling
    _until(lambda: monitor.last_progress is not None and (monitor.last_progress.step or 0) >= 1)
    assert monitor.last_progress is not None
    assert monitor.last_progress.state is JobState.RUNNING
    assert monitor.bar.bar_style == "info"
    assert 0 < monitor.bar.value < 1
    assert "ETA" in monitor.stats.value
    assert not monitor.cancel_button.disabled
    pid = monitor.last_progress.ranks[0].pid
    assert pid is not None

    monitor.cancel_button.click()
    _until(lambda: handle.state is JobState.CANCELLED)
    _until(lambda: not monitor.polling)  # the poller ends by itself once the job finished
    assert monitor.last_progress is not None and monitor.last_progress.state is JobState.CANCELLED
    assert monitor.bar.bar_style == "warning"
    assert monitor.cancel_button.disabled
    assert monitor.errors == []
    # no worker left behind
    _until(lambda: not Path(f"/proc/{pid}").exists(), timeout=30)
    monitor.close()


def test_saved_output_says_how_to_reattach(settings: Settings) -> None:
    handle = quick_job(settings)
    monitor = handle.monitor(start=False)
    bundle = monitor._repr_mimebundle_()
    assert bundle["text/plain"] == f"job {handle.id}: jupyter_starverse.attach({handle.id!r})"
    assert "application/vnd.jupyter.widget-view+json" in bundle
    monitor.close()


def test_monitor_shows_which_rank_crashed(settings: Settings) -> None:
    from jupyter_starverse._api import launch

    code = 'import os, time\nassert os.environ["RANK"] != "1", "rank 1 is broken"\ntime.sleep(1)\n'
    handle = launch(code=code, name="crash", procs=2, settings=settings)
    job = handle.wait(timeout=300)
    assert job.state is JobState.FAILED
    monitor = handle.monitor(start=False)
    progress = monitor.refresh()
    by_rank = {r.rank: r for r in progress.ranks}
    assert by_rank[1].state is JobState.FAILED
    assert by_rank[1].error == "AssertionError: rank 1 is broken"
    assert by_rank[0].error is None
    assert monitor.bar.bar_style == "danger"
    assert "AssertionError: rank 1 is broken" in monitor.ranks.value
    assert "[1] AssertionError: rank 1 is broken" in monitor.logs.value
    monitor.close()


def test_monitor_draws_a_reproductions_reference_curve_beside_the_live_loss(settings: Settings) -> None:
    # the reproduction's env as recipes set it: the CogVLM stage-1 curve (3.81 -> 2.05 over the run)
    handle = launch(code=QUICK, name="repro", steps=5, settings=settings,
                    env={"STARVERSE_REFERENCE_CURVE": "cogvlm-stage1"})  # fmt: skip
    job = handle.wait(timeout=300)
    assert job.state is JobState.SUCCEEDED, job.reason
    monitor = handle.monitor(start=False)
    progress = monitor.refresh()
    chart = monitor.chart.value
    ref = re.search(r'<polyline class="starverse-reference"[^>]* points="([^"]+)">', chart)
    assert ref is not None, chart
    drawn = [tuple(map(float, p.split(","))) for p in ref.group(1).split()]
    assert len(drawn) == len(progress.points) == 5  # the reference at each logged step
    # the reference falls 3.81 -> 3.458 over steps 0..4 of 5 (fraction axis), above the live loss
    # 2.0 -> 0.4: its y (pixels down) is smaller than the live line's at every step
    live = re.search(r'<polyline fill="none" stroke="#1f77b4"[^>]* points="([^"]+)"', chart)
    assert live is not None
    ys = [float(p.split(",")[1]) for p in live.group(1).split()]
    assert all(r[1] < y for r, y in zip(drawn, ys, strict=True))
    assert "published-endpoints" in chart  # its tooltip names what the line is
    # the job warned that it departed (2.0 vs 3.81 at the start: beyond the 15% tolerance)
    assert any("reference curve" in ln.render() for ln in handle.tail(50))
    # TensorBoard: the reference is a second run under the live tag, so both lines share a chart
    events = list((Path(handle.experiment_dir) / "tensorboard" / "reference").glob("events.out.tfevents.*"))
    assert events, "no reference run written for TensorBoard"
    # the panel's chart reads the same series from GET jobs/ID
    from jupyter_starverse.server._jobs import JobView

    served = JobView(handle.job, progress, points=True).to_json()["progress"]
    assert [s for s, _ in served["reference"]] == [0, 1, 2, 3, 4] and served["reference"][0][1] == 3.81
    assert served["reference_label"].startswith("published-endpoints: ")
    monitor.close()
