"""Kill the kernel that launched a job: the job runs on and a new kernel re-attaches to it."""

from __future__ import annotations

import os
import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.manager import KernelManager

from jupyter_starverse.client import Starverse
from jupyter_starverse.jobmodel import JobState

from ._jobs import SLOW

REPO = str(Path(__file__).resolve().parents[2])


def _run(kc: Any, code: str, timeout: float = 300) -> str:
    """Execute ``code`` in the kernel; return its stdout, fail on any error output."""
    msg_id = kc.execute(code)
    out: list[str] = []
    while True:
        try:
            msg = kc.get_iopub_msg(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"no kernel output for {timeout} s while running: {code}")
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream" and content["name"] == "stdout":
            out.append(content["text"])
        elif kind == "error":
            pytest.fail("kernel error:\n" + "\n".join(content["traceback"]))
        elif kind == "status" and content["execution_state"] == "idle":
            return "".join(out)


@pytest.fixture
def kernel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p))


def _start() -> tuple[KernelManager, Any]:
    km = KernelManager(kernel_name="python3")
    km.start_kernel(env=dict(os.environ))
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=120)
    return km, kc


@pytest.fixture
def kernels() -> Iterator[list[KernelManager]]:
    started: list[KernelManager] = []
    yield started
    for km in started:
        if km.is_alive():
            km.shutdown_kernel(now=True)


@pytest.mark.slow
def test_job_survives_a_killed_kernel_and_is_reattached(
    kernel_env: None, kernels: list[KernelManager], client: Starverse
) -> None:
    km, kc = _start()
    kernels.append(km)
    job_id = _run(
        kc,
        "import jupyter_starverse as sv\n"
        f"h = sv.launch(code={SLOW!r}, name='survivor', steps=16)\n"
        "m = h.monitor(interval=0.2)\n"  # a polling monitor in the kernel that is about to die
        "print(h.id)",
    ).strip()
    assert job_id.startswith("survivor-")
    kernel_pid = km.provisioner.pid if km.provisioner else None
    kc.stop_channels()
    km.shutdown_kernel(now=True)  # SIGKILL, no cleanup in the kernel
    assert not km.is_alive()
    if kernel_pid is not None:
        assert not Path(f"/proc/{kernel_pid}/status").exists() or "zombie" in Path(
            f"/proc/{kernel_pid}/status"
        ).read_text()

    job = client.attach(job_id)
    assert job.state in (JobState.PENDING, JobState.RUNNING), job.reason

    km2, kc2 = _start()
    kernels.append(km2)
    out = _run(
        kc2,
        "import jupyter_starverse as sv\n"
        f"h = sv.attach({job_id!r})\n"
        "m = h.monitor(start=False)\n"
        "p = m.refresh()\n"
        "print(p.state.value)\n"
        "job = h.wait(timeout=240)\n"
        "print(job.state.value, h.progress().step)",
    )
    first, final = out.strip().splitlines()
    assert first in ("pending", "running")
    assert final == "succeeded 15"
    kc2.stop_channels()
