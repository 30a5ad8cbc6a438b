"""Switch from inside a kernel (``%sv mode``, the toggle widget): save, switch, restart, restore.

The kernel saves its own namespace (it cannot be asked to while it runs the cell that asks),
the workspace is switched, and then:

- local workspace: the Jupyter server running this kernel (found through its runtime file,
  authenticated with its token) is asked to restart the kernel in the new mode and restore
  the state (``POST jupyter-starverse/mode/kernels/ID``); without one, the user restarts the
  kernel and runs ``%sv mode restore``;
- Kubernetes / JupyterHub: the workspace restarts as a whole; the state waits on disk.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._kernelstate import RestoreReport, discard_state, restore_namespace, save_namespace
from ._plan import SwitchResult
from ._switch import PREVIOUS_CUDA_ENV, kernel_env

if TYPE_CHECKING:
    from ._state import ModeService

__all__ = ["kernel_id", "restore_here", "switch_here"]


def kernel_id() -> str | None:
    """This kernel's id (from its connection file name), or None outside a Jupyter kernel."""
    try:
        from ipykernel.connect import get_connection_file

        name = Path(get_connection_file()).name
    except (ImportError, RuntimeError, AttributeError):
        return None
    return name[len("kernel-") : -len(".json")] if name.startswith("kernel-") and name.endswith(".json") else None


def switch_here(
    service: ModeService,
    namespace: MutableMapping[str, Any],
    kind: str,
    *,
    gpu_type: str | None = None,
    gpus: int | None = None,
    force: bool = False,
) -> SwitchResult:
    """Switch the workspace from this kernel, keeping ``namespace`` (the kernel's variables)."""
    plan = service.plan(kind, gpu_type=gpu_type, gpus=gpus, force=force)
    if not plan.changes:
        return SwitchResult(plan, None)
    kid = kernel_id()
    home = service.settings.home
    saved = save_namespace(namespace, home=home, from_mode=str(plan.current), to_mode=str(plan.target), kernel_id=kid)
    try:
        outcome = service.apply(plan)
    except BaseException:
        discard_state(home, saved.id)  # nothing switched: the kernel still has everything
        raise
    if outcome is None or outcome.restarts_workspace:
        message = "the workspace moves now; when it is back, run `%sv mode restore` to get the variables back"
        return SwitchResult(plan, outcome, saved=(saved,), message=message)
    requested = kid is not None and _ask_server_to_restart(kid, saved.id)
    if requested:
        message = f"the kernel restarts in {plan.target} mode now and gets its variables back"
    else:
        message = f"restart the kernel now (Kernel > Restart), then run `%sv mode restore {saved.id}`"
    return SwitchResult(plan, outcome, saved=(saved,), message=message, restart_requested=requested)


def restore_here(
    service: ModeService,
    namespace: MutableMapping[str, Any],
    *,
    state_id: str | None = None,
    skip: tuple[str, ...] = (),
) -> RestoreReport:
    """Restore a saved state into this kernel, first hiding/showing GPUs for the current mode."""
    # A kernel restarted by hand kept its old environment: set GPU visibility before
    # anything in the restored state imports torch.
    wanted = kernel_env(service.current(), os.environ)
    for key in ("CUDA_VISIBLE_DEVICES", PREVIOUS_CUDA_ENV):
        if key in wanted:
            os.environ[key] = wanted[key]
        else:
            os.environ.pop(key, None)
    return restore_namespace(namespace, home=service.settings.home, state_id=state_id, skip=skip)


def _ask_server_to_restart(kid: str, state_id: str) -> bool:
    """Ask the Jupyter server that runs kernel ``kid`` to restart it in the new mode and restore it."""
    try:
        from jupyter_server.serverapp import list_running_servers
    except ImportError:
        return False
    for info in list_running_servers():
        url, token = str(info.get("url", "")), str(info.get("token") or "")
        if not url.startswith(("http://", "https://")) or not token:
            continue
        target = f"{url.rstrip('/')}/jupyter-starverse/mode/kernels/{kid}"
        body = json.dumps({"state_id": state_id}).encode()
        req = urllib.request.Request(target, data=body, method="POST")  # noqa: S310 - scheme checked above
        req.add_header("Authorization", f"token {token}")
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310
                if resp.status == 202:
                    return True
        except (urllib.error.URLError, OSError):
            continue  # not this kernel's server, or no starverse extension there
    return False
