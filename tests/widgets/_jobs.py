"""Tiny real jobs for the notebook-side tests (one local node, one process, no torch in the script)."""

from __future__ import annotations

from jupyter_starverse._api import launch
from jupyter_starverse._settings import Settings
from jupyter_starverse.widgets import JobHandle

# logs a falling loss through the runtime (metrics.jsonl) and prints it (logs)
QUICK = """
import time
from jupyter_starverse import runtime as sv
for step in range(5):
    sv.log_metrics(step, loss=2.0 / (step + 1))
    print(f"step {step} loss {2.0 / (step + 1):.3f}", flush=True)
    time.sleep(0.05)
"""

# runs for STARVERSE_STEPS half-second steps (long enough to kill, cancel or re-attach)
SLOW = """
import os, time
from jupyter_starverse import runtime as sv
for step in range(int(os.environ.get("STARVERSE_STEPS", "600"))):
    sv.log_metrics(step, loss=1.0 / (step + 1))
    print(f"step {step}", flush=True)
    time.sleep(0.5)
"""


def quick_job(settings: Settings, name: str = "quick") -> JobHandle:
    """A finished job with 5 metric records."""
    handle = launch(code=QUICK, name=name, steps=5, settings=settings)
    job = handle.wait(timeout=300)
    assert job.state.value == "succeeded", (job.reason, [ln.render() for ln in handle.tail(30)])
    return handle


def slow_job(settings: Settings, name: str = "slow", steps: int = 600) -> JobHandle:
    """A running job that has logged two steps (so it has a speed and an ETA)."""
    import time

    handle = launch(code=SLOW, name=name, steps=steps, settings=settings)
    deadline = time.monotonic() + 300
    while len(handle.metrics()) < 2:
        job = handle.job
        assert not job.state.finished, (job.reason, [ln.render() for ln in handle.tail(30)])
        assert time.monotonic() < deadline, "the job logged no step in 300 s"
        time.sleep(0.3)
    return handle
