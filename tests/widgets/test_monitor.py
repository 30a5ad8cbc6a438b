from __future__ import annotations

import shutil
import time
from pathlib import Path

from jupyter_starverse._settings import Settings
from jupyter_starverse.jobmodel import JobState
from jupyter_starverse.widgets.monitor import JobMonitor

from ._jobs import quick_job, slow_job


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
    assert "<polyline" in monitor.chart.value
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
