"""``StarverseApp``: the jupyter-server ExtensionApp, configurable as ``c.StarverseApp.*``."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from jupyter_server.extension.application import ExtensionApp
from traitlets import Enum, Float, Unicode

from .._settings import BACKENDS, Settings
from ..client import Starverse
from ._routes import make_handlers

if TYPE_CHECKING:
    from jupyter_client.manager import AsyncKernelManager

    from jupyter_starverse.modes import SwitchPlan, SwitchResult

__all__ = ["StarverseApp"]


class StarverseApp(ExtensionApp):
    """Serves ``/jupyter-starverse/*``. Traits left empty fall back to ``STARVERSE_*`` variables."""

    name = "jupyter_starverse"
    load_other_extensions = True

    store = Unicode("", config=True, help="Shared store (fsspec URL or path). Default: $STARVERSE_STORE.")
    experiments = Unicode("", config=True, help="Experiments root. Default: $STARVERSE_EXPERIMENTS.")
    backend = Enum(
        ["", *BACKENDS], default_value="", config=True, help="Default launch backend. Default: $STARVERSE_BACKEND."
    )
    prices_file = Unicode(
        "", config=True, help="Price table (JSON) replacing the shipped one. Default: $STARVERSE_PRICES."
    )
    currency = Unicode(
        "", config=True, help="Currency shown, overriding the price table's. Default: $STARVERSE_CURRENCY."
    )
    namespace = Unicode("", config=True, help="Kubernetes namespace. Default: $STARVERSE_NAMESPACE.")
    keep_jobs_every = Float(
        30.0,
        config=True,
        help="Seconds between looks at unfinished Kubernetes jobs, which record what the cluster"
        " recovered (restarts, lost work) for jobs nobody follows (0: off).",
    )

    def settings_from_config(self) -> Settings:
        """Settings from the environment, overridden by every trait the operator set."""
        settings = Settings.from_env()
        changes: dict[str, Any] = {}
        if self.store:
            changes["store"] = self.store if "://" in self.store else str(Path(self.store).expanduser().absolute())
        if self.experiments:
            changes["experiments"] = Path(self.experiments).expanduser().absolute()
        if self.backend:
            changes["backend"] = self.backend
        if self.prices_file:
            changes["prices_file"] = Path(self.prices_file).expanduser().absolute()
        if self.currency:
            changes["currency"] = self.currency.upper()
        if self.namespace:
            changes["namespace"] = self.namespace
        return settings.replace(**changes) if changes else settings

    def initialize_settings(self) -> None:
        settings = self.settings_from_config()
        root = getattr(self.serverapp, "root_dir", None) if self.serverapp is not None else None
        if root and not settings.source_roots:  # REST data steps read the store and the server's root only
            settings = settings.replace(source_roots=(Path(root).expanduser().resolve(),))
        client = Starverse(settings)
        self.settings.update({"starverse_client": client})
        self.log.info("jupyter_starverse: store=%s backend=%s", client.settings.store, client.settings.backend)
        self._idle_stop: asyncio.Event | None = None
        self._idle_task: asyncio.Future[None] | None = None
        self._keep_stop = asyncio.Event()
        self._keep_task: asyncio.Future[None] | None = None
        from tornado.ioloop import IOLoop

        if client.settings.workspace_idle_minutes:
            IOLoop.current().add_callback(self._watch_idle, client)
        if self.keep_jobs_every > 0:
            IOLoop.current().add_callback(self._start_keeping, client)

    def _start_keeping(self, client: Starverse) -> None:
        self._keep_task = asyncio.ensure_future(self._keep_jobs(client, self.keep_jobs_every))

    async def _keep_jobs(self, client: Starverse, every: float) -> None:
        """Look at unfinished Kubernetes jobs every ``every`` seconds (see ``Starverse.keep_jobs``)."""
        while not self._keep_stop.is_set():
            try:
                await asyncio.to_thread(client.keep_jobs)
            except Exception as e:  # a cluster that does not answer now may answer at the next look
                self.log.debug("jupyter_starverse: the look at Kubernetes jobs failed: %s", e)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._keep_stop.wait(), timeout=every)

    def _kernels(self) -> dict[str, AsyncKernelManager]:
        if self.serverapp is None:
            return {}
        mkm = self.serverapp.kernel_manager
        return {kid: cast("AsyncKernelManager", mkm.get_kernel(kid)) for kid in mkm.list_kernel_ids()}

    async def _watch_idle(self, client: Starverse) -> None:
        """A GPU workspace left idle with no cell running switches to no-GPU mode, keeping its variables."""
        from jupyter_starverse.modes import WorkspaceIdleGuard, watch_idle

        from ._kernels import switch_with_kernels

        def busy() -> bool:
            return any(getattr(km, "execution_state", "idle") == "busy" for km in self._kernels().values())

        async def switch(plan: SwitchPlan) -> SwitchResult:
            return await switch_with_kernels(client.modes, plan, self._kernels())

        self._idle_stop = asyncio.Event()
        guard = WorkspaceIdleGuard(client.modes)
        every = min(60.0, client.settings.workspace_idle_minutes * 15)  # four looks per idle period at least
        self._idle_task = asyncio.ensure_future(
            watch_idle(guard, busy=busy, switch=switch, every=every, stop=self._idle_stop)
        )

    def initialize_handlers(self) -> None:
        self.handlers.extend(make_handlers())

    async def stop_extension(self) -> None:
        for stop, task in (
            (getattr(self, "_idle_stop", None), getattr(self, "_idle_task", None)),
            (getattr(self, "_keep_stop", None), getattr(self, "_keep_task", None)),
        ):
            if stop is not None and task is not None:
                stop.set()
                with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(task, 5)
        client = self.settings.get("starverse_client")
        close = getattr(client, "close", None)
        if callable(close):
            close()
