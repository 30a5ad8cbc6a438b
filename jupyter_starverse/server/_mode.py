"""REST for the GPU/CPU mode.

- ``GET  mode``                 -> ModeStatus (mode, where, price per hour, saved states)
- ``GET  mode/plan?kind=cpu``   -> SwitchPlan (price before/after/difference, for the dialog)
- ``PUT  mode``                 -> SwitchResult: ``{"kind", "gpu_type"?, "gpus"?, "force"?}``;
  every running kernel is saved, the workspace switched, and (local) each kernel restarted
  in the new mode and restored. The answer carries the price difference per hour.
- ``POST mode/kernels/ID``      -> 202: restart one kernel in the current mode and restore
  ``{"state_id"}`` into it (what ``%sv mode`` asks for after saving its own variables).
- ``DELETE mode/saved/ID``      -> discard a saved state.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, cast

from tornado import web

from jupyter_starverse.errors import BadInputError, NotFoundError
from jupyter_starverse.modes import discard_state, read_state
from jupyter_starverse.server._kernels import restart_kernel, restore_kernel, switch_with_kernels

from ._base import StarverseHandler

if TYPE_CHECKING:
    from jupyter_client.manager import AsyncKernelManager

__all__ = ["routes"]

_IDLE_WAIT_S = 30.0
_background: set[asyncio.Task[Any]] = set()


def _switch_args(body: dict[str, Any]) -> dict[str, Any]:
    kind = body.get("kind")
    if not isinstance(kind, str):
        raise BadInputError("'kind' must be 'cpu' or 'gpu'", field="kind")
    gpu_type = body.get("gpu_type")
    if gpu_type is not None and not isinstance(gpu_type, str):
        raise BadInputError("'gpu_type' must be a string", field="gpu_type")
    gpus = body.get("gpus")
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1):
        raise BadInputError("'gpus' must be a whole number >= 1", field="gpus")
    return {"kind": kind, "gpu_type": gpu_type or None, "gpus": gpus, "force": bool(body.get("force", False))}


class ModeHandler(StarverseHandler):
    @web.authenticated
    async def get(self) -> None:
        self.finish_json(await self.run(self.client.modes.status))

    @web.authenticated
    async def put(self) -> None:
        args = _switch_args(self.json_body())
        service = self.client.modes
        plan = await self.run(service.plan, args.pop("kind"), **args)
        mkm = self.kernel_manager
        kernels = {kid: cast("AsyncKernelManager", mkm.get_kernel(kid)) for kid in mkm.list_kernel_ids()}
        self.finish_json(await switch_with_kernels(service, plan, kernels))


class PlanHandler(StarverseHandler):
    @web.authenticated
    async def get(self) -> None:
        gpus = self.query("gpus")
        if gpus is not None and not gpus.isdigit():
            raise BadInputError("'gpus' must be a whole number", field="gpus")
        args = _switch_args({"kind": self.query("kind"), "gpu_type": self.query("gpu_type"),
                             "gpus": int(gpus) if gpus else None, "force": self.query("force") == "true"})
        self.finish_json(await self.run(self.client.modes.plan, args.pop("kind"), **args))


class KernelRestartHandler(StarverseHandler):
    @web.authenticated
    async def post(self, kernel_id: str) -> None:
        state_id = self.json_body().get("state_id")
        if not isinstance(state_id, str):
            raise BadInputError("'state_id' is required", field="state_id")
        mkm = self.kernel_manager
        if kernel_id not in mkm:
            raise NotFoundError(f"no running kernel {kernel_id}", hint="is the notebook's kernel on this server?")
        home = self.client.settings.home
        state = await self.run(read_state, home, state_id)
        mode = await self.run(self.client.modes.current)
        km = cast("AsyncKernelManager", mkm.get_kernel(kernel_id))

        async def restart_and_restore() -> None:
            # Let the cell that asked for this finish (its output reaches the notebook) first.
            loop = asyncio.get_running_loop()
            deadline = loop.time() + _IDLE_WAIT_S
            await asyncio.sleep(0.2)
            while getattr(km, "execution_state", "idle") == "busy" and loop.time() < deadline:
                await asyncio.sleep(0.1)
            try:
                await restart_kernel(km, mode)
                await restore_kernel(km, state, home=home)
            except Exception as e:  # reported in the log; the state stays on disk for `%sv mode restore`
                self.log.warning("jupyter_starverse: restoring kernel %s failed: %s", kernel_id, e)

        task = asyncio.ensure_future(restart_and_restore())
        _background.add(task)
        task.add_done_callback(_background.discard)
        self.finish_json({"kernel_id": kernel_id, "state_id": state.id, "mode": mode.to_json()}, status=202)


class SavedStateHandler(StarverseHandler):
    @web.authenticated
    async def delete(self, state_id: str) -> None:
        await self.run(discard_state, self.client.settings.home, state_id)
        self.set_status(204)
        self.finish()


routes: list[tuple[str, type[StarverseHandler]]] = [
    (r"mode", ModeHandler),
    (r"mode/plan", PlanHandler),
    (r"mode/kernels/(?P<kernel_id>[0-9a-zA-Z_-]+)", KernelRestartHandler),
    (r"mode/saved/(?P<state_id>[0-9a-f-]+)", SavedStateHandler),
]
