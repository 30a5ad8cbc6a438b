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

from ._base import StarverseHandler, parse_int

if TYPE_CHECKING:
    from jupyter_client.manager import AsyncKernelManager

__all__ = ["routes"]

_IDLE_WAIT_S = 30.0
MAX_GPUS = 64  # cards of one workspace (one node)
_background: set[asyncio.Task[Any]] = set()


def _switch_args(body: dict[str, Any]) -> dict[str, Any]:
    kind = body.get("kind")
    if not isinstance(kind, str):
        raise BadInputError("'kind' must be 'cpu' or 'gpu'", field="kind", hint='e.g. {"kind": "gpu", "gpus": 1}')
    gpu_type = body.get("gpu_type")
    if gpu_type is not None and (not isinstance(gpu_type, str) or len(gpu_type) > 64):
        raise BadInputError("'gpu_type' must be a GPU type name", field="gpu_type", hint="e.g. a100-80g")
    force = body.get("force", False)
    if not isinstance(force, bool):
        raise BadInputError("'force' must be true or false", field="force")
    gpus = body.get("gpus")
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= MAX_GPUS):
        raise BadInputError(f"'gpus' must be a whole number between 1 and {MAX_GPUS}", field="gpus",
                            hint="for example 1, 2 or 8")  # fmt: skip
    return {"kind": kind, "gpu_type": gpu_type or None, "gpus": gpus, "force": force}


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
        gpus = parse_int(self.query("gpus"), "gpus", default=None, low=1, high=MAX_GPUS)
        args = _switch_args(
            {
                "kind": self.query("kind"),
                "gpu_type": self.query("gpu_type"),
                "gpus": gpus,
                "force": self.query("force") == "true",
            }
        )
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
