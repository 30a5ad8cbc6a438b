"""Fixtures for the mode tests: isolated settings and a real IPython kernel."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_starverse._settings import Settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _a_gpu_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests play a machine with a GPU (GPU mode is refused on one without: test_no_gpu.py)."""
    monkeypatch.setenv("STARVERSE_LOCAL_GPU", "yes")


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    home = tmp_path / "home"
    return Settings.from_env(
        {
            "STARVERSE_HOME": str(home),
            "STARVERSE_STORE": str(tmp_path / "store"),
            "STARVERSE_EXPERIMENTS": str(tmp_path / "experiments"),
            "STARVERSE_MODE": "gpu",
            "STARVERSE_GPU_TYPE": "a100-80g",
            "STARVERSE_USER": "ada",
            "STARVERSE_WORKSPACE": "local",
            "STARVERSE_LOCAL_GPU": "yes",
        }
    )


@contextlib.asynccontextmanager
async def running_kernel(cwd: Path) -> AsyncIterator[Any]:
    """A real ipykernel of this venv, started through jupyter_client's AsyncKernelManager."""
    from jupyter_client.manager import AsyncKernelManager

    km = AsyncKernelManager(kernel_name="python3")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["OMP_NUM_THREADS"] = "1"
    env.pop("CUDA_VISIBLE_DEVICES", None)
    await km.start_kernel(env=env, cwd=str(cwd))
    try:
        yield km
    finally:
        await km.shutdown_kernel(now=True)


async def run_cell(km: Any, code: str, *, timeout: float = 120.0) -> dict[str, Any]:
    """Execute ``code`` like a notebook cell; return ``{"status", "stdout", "error"}``."""
    kc = km.client()
    kc.start_channels()
    try:
        await kc.wait_for_ready(timeout=timeout)
        out: list[str] = []

        def hook(msg: dict[str, Any]) -> None:
            if msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
                out.append(msg["content"]["text"])

        reply = await kc.execute_interactive(code, timeout=timeout, output_hook=hook)
    finally:
        kc.stop_channels()
    content = reply["content"]
    return {
        "status": content["status"],
        "stdout": "".join(out),
        "error": f"{content.get('ename')}: {content.get('evalue')}" if content["status"] != "ok" else None,
    }
