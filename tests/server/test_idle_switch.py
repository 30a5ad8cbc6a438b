"""The server runs the workspace's idle switch: a GPU workspace whose GPU reads 0% with no cell
running switches itself to no-GPU mode and leaves a notice (the guard is unit-tested in tests/modes)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from jupyter_starverse._settings import Settings
from jupyter_starverse.modes import Mode, ModeService, WorkspaceIdleGuard


@pytest.fixture
def idle_gpu_workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModeService:
    util = tmp_path / "gpu-util"
    util.write_text("0\n")
    monkeypatch.setenv("STARVERSE_GPU_UTIL_FILE", str(util))
    monkeypatch.setenv("STARVERSE_WORKSPACE_IDLE_MINUTES", "0.01")  # 0.6 s, looked at every 0.15 s
    service = ModeService(Settings.from_env())
    service.record(Mode("gpu", "a100-80g", 1))
    return service


pytestmark = pytest.mark.usefixtures("idle_gpu_workspace")


async def test_the_server_switches_an_idle_gpu_workspace_to_cpu(jp_serverapp: Any,
                                                                idle_gpu_workspace: ModeService) -> None:  # fmt: skip
    service = idle_gpu_workspace
    for _ in range(200):
        if service.current().kind == "cpu":
            break
        await asyncio.sleep(0.1)
    assert service.current().kind == "cpu", "the idle GPU workspace was not switched by the server"
    notice = WorkspaceIdleGuard(service).notice()
    assert notice is not None and notice.kind == "switched", notice
    assert "switch back with `%sv mode gpu`" in notice.message
