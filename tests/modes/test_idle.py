"""The workspace's idle switch: a GPU that stays idle with no running cell -> a warning, then
no-GPU mode with the variables kept (a real kernel, the server's switch with kernels)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from jupyter_starverse._settings import Settings
from jupyter_starverse.modes import Mode, ModeService, WorkspaceIdleGuard, watch_idle
from jupyter_starverse.server._kernels import switch_with_kernels

from .conftest import run_cell, running_kernel


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _service(settings: Settings, minutes: float) -> ModeService:
    service = ModeService(settings.replace(workspace_idle_minutes=minutes))
    service.record(Mode("gpu", "a100-80g", 1))
    return service


def test_warning_then_plan_to_cpu_and_activity_resets(settings: Settings) -> None:
    service, clock = _service(settings, 10), Clock()
    util: list[float | None] = [0.0]
    guard = WorkspaceIdleGuard(service, utilisation=lambda: util[0], clock=clock)
    assert guard.check(busy=False) is None and guard.notice() is None
    clock.now += 6 * 60
    assert guard.check(busy=False) is None  # 6 min idle: the warning (5 min before the switch)
    notice = guard.notice()
    assert notice is not None and notice.kind == "warning" and "switches to no-GPU mode in 4 min" in notice.message
    clock.now += 3 * 60
    assert guard.check(busy=True) is None  # a running cell: not idle
    clock.now += 9 * 60
    assert guard.check(busy=False) is None  # the idle stretch starts again
    util[0] = 90.0
    clock.now += 60
    assert guard.check(busy=False) is None and guard.tracker.idle_since is None  # the GPU works
    util[0] = 0.0
    guard.check(busy=False)
    clock.now += 10 * 60
    plan = guard.check(busy=False)
    assert plan is not None and plan.target == Mode("cpu") and plan.current.kind == "gpu"
    service.record(Mode("cpu"))
    assert guard.check(busy=False) is None  # CPU mode: nothing to guard
    off = WorkspaceIdleGuard(_service(settings, 0), utilisation=lambda: 0.0, clock=clock)
    clock.now += 10**6
    assert off.check(busy=False) is None


def test_an_idle_gpu_workspace_switches_to_cpu_keeping_the_variables(settings: Settings, tmp_path: Path) -> None:
    service = _service(settings, 0.002)  # 0.12 s: the warning at once, then the switch

    async def scenario() -> None:
        async with running_kernel(tmp_path) as km:
            assert (await run_cell(km, "kept = 41 + 1"))["status"] == "ok"
            guard = WorkspaceIdleGuard(service, utilisation=lambda: 0.0)
            stop = asyncio.Event()

            async def switch(plan: object) -> object:
                result = await switch_with_kernels(service, plan, {km.kernel_id: km})  # type: ignore[arg-type]
                stop.set()
                return result

            busy = lambda: getattr(km, "execution_state", "idle") == "busy"  # noqa: E731
            await asyncio.wait_for(watch_idle(guard, busy=busy, switch=switch, every=0.05, stop=stop), 120)
            assert service.current() == Mode("cpu")
            notice = guard.notice()
            assert notice is not None and notice.kind == "switched", notice
            assert "no-GPU mode, variables of 1 kernel(s) kept" in notice.message
            out = await run_cell(km, "import os; print(kept, os.environ.get('STARVERSE_MODE'))")
            assert out["stdout"].split() == ["42", "cpu"], out

    asyncio.run(scenario())
