"""Switch through the Jupyter front: from inside a kernel, or by asking the running server.

``switch_here`` (``%sv mode``, the toggle widget): save, switch, restart, restore.
``switch_via_server`` (``starverse mode`` in a terminal): the server owns the kernels, so
it saves and restores them; a switch made without it would lose their variables.

The kernel saves its own namespace (it cannot be asked to while it runs the cell that asks),
the workspace is switched, and then:

- local workspace: the Jupyter server running this kernel (found through its runtime file,
  authenticated with its token) is asked to restart the kernel in the new mode and restore
  the state (``POST jupyter-starverse/mode/kernels/ID``); without one, the user restarts the
  kernel and runs ``%sv mode restore``;
- Kubernetes / JupyterHub: the workspace restarts as a whole; the state waits on disk.
"""

from __future__ import annotations

import contextlib
import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_starverse.errors import (
    BackendUnavailableError,
    BadInputError,
    ConflictError,
    NotFoundError,
    PermissionDeniedError,
    StarverseError,
)

from .._format import format_price_per_hour
from ._kernelstate import RestoreReport, discard_state, restore_namespace, save_namespace
from ._plan import SwitchResult
from ._switch import PREVIOUS_CUDA_ENV, kernel_env

if TYPE_CHECKING:
    from ._state import ModeService

__all__ = ["ServerSwitch", "kernel_id", "restore_here", "switch_here", "switch_via_server"]


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
        with contextlib.suppress(StarverseError):  # the switch's own error is the one to show
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


def _servers() -> Iterator[tuple[str, str]]:
    """``(url, token)`` of the Jupyter servers of this user on this machine."""
    try:
        from jupyter_server.serverapp import list_running_servers
    except ImportError:
        return
    for info in list_running_servers():
        url, token = str(info.get("url", "")), str(info.get("token") or "")
        if url.startswith(("http://", "https://")) and token:
            yield url.rstrip("/"), token


def _call(url: str, token: str, method: str, body: Any, *, timeout: float) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)  # noqa: S310 - http(s) only
    req.add_header("Authorization", f"token {token}")
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, None


def _ask_server_to_restart(kid: str, state_id: str) -> bool:
    """Ask the Jupyter server that runs kernel ``kid`` to restart it in the new mode and restore it."""
    for url, token in _servers():
        try:
            code, _ = _call(f"{url}/jupyter-starverse/mode/kernels/{kid}", token, "POST", {"state_id": state_id},
                            timeout=10)
        except (urllib.error.URLError, OSError):
            continue
        if code == 202:
            return True
    return False


@dataclass(frozen=True)
class ServerSwitch:
    """A switch the running Jupyter server made (it saved and restored its kernels)."""

    server: str
    result: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return self.result

    def __str__(self) -> str:
        mode = self.result.get("mode") or {}
        label = "cpu" if mode.get("kind") == "cpu" else f"gpu ({mode.get('gpus')} x {mode.get('gpu_type')})"
        price = self.result.get("price") or {}
        lines = [
            f"switched to {label} through the Jupyter server at {self.server}; "
            f"price difference {_signed_per_hour(price.get('difference_per_hour'), price.get('currency', ''))}"
        ]
        for k in self.result.get("kernels", []):
            restored = ", ".join((k.get("restore") or {}).get("restored", [])) or "-"
            lost = ", ".join(f"{n} ({why})" for n, why in (k.get("saved") or {}).get("not_kept", {}).items())
            lines.append(f"kernel {k.get('kernel_id')}: restored {restored}" + (f"; not kept: {lost}" if lost else ""))
            if k.get("error"):
                lines.append(f"  error: {k['error']}")
        if self.result.get("message"):
            lines.append(str(self.result["message"]))
        return "\n".join(lines)


_ERRORS: dict[int, type[StarverseError]] = {
    400: BadInputError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    503: BackendUnavailableError,
}


def switch_via_server(
    kind: str,
    *,
    experiments: str,
    gpu_type: str | None = None,
    gpus: int | None = None,
    force: bool = False,
    timeout: float = 600.0,
) -> ServerSwitch | None:
    """Let the running Jupyter server switch (it saves and restores its kernels); None if there is none.

    Only a server of the same workspace is asked: one whose experiments root is ``experiments``.
    """
    body = {"kind": kind, "gpu_type": gpu_type, "gpus": gpus, "force": force}
    for url, token in _servers():
        try:
            code, info = _call(f"{url}/jupyter-starverse/info", token, "GET", None, timeout=10)
            if code != 200 or not isinstance(info, dict) or info.get("experiments") != experiments:
                continue
            code, reply = _call(f"{url}/jupyter-starverse/mode", token, "PUT", body, timeout=timeout)
        except (urllib.error.URLError, OSError):
            continue
        if code == 200 and isinstance(reply, dict):
            return ServerSwitch(url, reply)
        if isinstance(reply, dict) and "message" in reply:
            cls = _ERRORS.get(code, StarverseError)
            raise cls(f"{reply['message']} (server {url})", hint=reply.get("hint"))
        # no starverse extension on that server: try the next one
    return None


def _signed_per_hour(amount: object, currency: str) -> str:
    """``'-6.4'`` -> ``-6.40 CNY/h`` (the server's decimal string, signed; ``unknown`` without one)."""
    if amount is None:
        return "unknown"
    text = str(amount).strip()
    sign = "-" if text.startswith("-") else "+"
    return f"{sign}{format_price_per_hour(text.lstrip('+-'), currency)}"
