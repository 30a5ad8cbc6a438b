"""The workspace's idle switch: GPU mode with idle GPUs and no running cell for
``STARVERSE_WORKSPACE_IDLE_MINUTES`` -> a warning, then a switch to no-GPU mode that keeps the
variables (the same save / switch / restore as a switch the user asks for).

:class:`WorkspaceIdleGuard` decides (pure but for the utilisation reading and the notice file);
:func:`watch_idle` is the loop a server runs, given how to tell a running cell and how to make a
switch with its kernels. The last notice is kept in ``$STARVERSE_HOME/mode-notice.json`` and
read back with :meth:`WorkspaceIdleGuard.notice` (the panel and ``mode`` show it).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_starverse._format import format_price_per_hour
from jupyter_starverse.errors import StarverseError
from jupyter_starverse.experiments import read_json, write_json
from jupyter_starverse.runtime._guards import IdleTracker, gpu_utilisation

if TYPE_CHECKING:
    from ._plan import SwitchPlan
    from ._state import ModeService

__all__ = ["IdleNotice", "WorkspaceIdleGuard", "watch_idle"]

NOTICE = "mode-notice.json"


@dataclass(frozen=True)
class IdleNotice:
    """What the idle guard told the user: ``warning`` (a switch is coming) or ``switched``."""

    kind: str
    message: str
    time: float

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "time": self.time}


class WorkspaceIdleGuard:
    """Watches a GPU-mode workspace; :meth:`check` returns the switch plan once it idled long enough.

    ``utilisation`` reads the GPUs (percent, ``None``: no reading); ``clock`` gives the time.
    """

    def __init__(
        self,
        service: ModeService,
        *,
        utilisation: Callable[[], float | None] = gpu_utilisation,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.service = service
        minutes = service.settings.workspace_idle_minutes
        self.tracker = IdleTracker(minutes=minutes, warn_minutes=min(5.0, minutes / 2))
        self.utilisation = utilisation
        self.clock = clock
        self.warned = False

    @property
    def path(self) -> Path:
        return self.service.settings.home / NOTICE

    def notice(self) -> IdleNotice | None:
        data = read_json(self.path)
        if not isinstance(data, dict):
            return None
        return IdleNotice(str(data.get("kind")), str(data.get("message")), float(data.get("time") or 0))

    def _tell(self, kind: str, message: str) -> IdleNotice:
        notice = IdleNotice(kind, message, self.clock())
        write_json(self.path, notice.to_json())
        return notice

    def check(self, *, busy: bool) -> SwitchPlan | None:
        """One look: a warning notice when the switch nears, the plan to CPU mode when it is due."""
        if not self.tracker.minutes or self.service.current().kind != "gpu":
            self.tracker.idle_since, self.warned = None, False
            return None
        now = self.clock()
        verdict = self.tracker.observe(now, self.utilisation(), busy=busy)
        idle = self.tracker.idle_minutes(now)
        if verdict == "ok":
            self.warned = False
            return None
        if verdict == "warn":
            if not self.warned:
                self.warned = True
                left = self.tracker.minutes - idle
                self._tell("warning", f"the GPU has been idle for {idle:.0f} min with no cell running: the "
                           f"workspace switches to no-GPU mode in {left:.0f} min (variables are kept); run a cell "
                           "or use the GPU to stay")  # fmt: skip
            return None
        try:
            return self.service.plan("cpu")
        except StarverseError as e:  # a pull runs, or the switcher refuses: try again at the next look
            self._tell("warning", f"the GPU is idle, but the switch to no-GPU mode waits: {e.message}")
            return None

    def switched(self, result: Any) -> IdleNotice:
        """Record the notice of a switch the guard asked for (``result``: the SwitchResult)."""
        self.tracker.idle_since, self.warned = None, False
        saved = len(getattr(result, "saved", ()) or ()) or len(getattr(result, "kernels", ()) or ())
        price = getattr(getattr(result, "plan", None), "price", None)
        saving = ""
        if price is not None and getattr(price, "before", None) is not None and price.after is not None:
            after, before = (format_price_per_hour(p, price.currency) for p in (price.after, price.before))
            saving = f"; the workspace now costs {after} instead of {before}"
        return self._tell(
            "switched",
            f"the GPU was idle for {self.tracker.minutes:g} min with no cell running: the workspace switched to "
            f"no-GPU mode, variables of {saved} kernel(s) kept{saving}; switch back with `%sv mode gpu`",
        )


async def watch_idle(
    guard: WorkspaceIdleGuard,
    *,
    busy: Callable[[], bool],
    switch: Callable[[SwitchPlan], Awaitable[Any]],
    every: float = 60.0,
    stop: asyncio.Event | None = None,
) -> None:
    """Look every ``every`` seconds until ``stop`` is set; make the switch the guard asks for.

    ``busy``: whether a cell runs in any kernel now; ``switch``: saves, switches and restores the
    kernels (a server's ``switch_with_kernels``). A failed look or switch is retried at the next one.
    """
    stop = stop or asyncio.Event()
    while not stop.is_set():
        plan = None
        with contextlib.suppress(StarverseError, OSError):
            plan = await asyncio.to_thread(guard.check, busy=busy())
        if plan is not None:
            try:
                guard.switched(await switch(plan))
            except (StarverseError, OSError, RuntimeError) as e:
                guard._tell("warning", f"the switch to no-GPU mode failed: {e}; it is tried again")
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=every)
