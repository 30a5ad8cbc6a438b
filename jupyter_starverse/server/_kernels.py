"""Switch running kernels: save their variables, restart them in the new mode, restore.

Works with any ``jupyter_client`` ``AsyncKernelManager`` (the kernels of a Jupyter server,
or one a test starts). The code run inside the kernel is
:mod:`jupyter_starverse.modes._kernelstate`; it is executed silently (no history, no
``Out``) and only with literal arguments this module writes, never user text.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_starverse.errors import ConflictError, StarverseError
from jupyter_starverse.modes import KernelSwitchReport, RestoreReport, SavedState, kernel_env, new_state_id, read_state

if TYPE_CHECKING:
    from collections.abc import Mapping

    from jupyter_client.asynchronous.client import AsyncKernelClient
    from jupyter_client.manager import AsyncKernelManager

    from jupyter_starverse.modes import Mode, ModeService, SwitchPlan, SwitchResult

__all__ = ["KernelSwitchReport", "restart_kernel", "restore_kernel", "save_kernel", "switch_kernel"]

_MODULE = "jupyter_starverse.modes._kernelstate"


class _KernelDied(Exception):
    pass


async def _execute(km: AsyncKernelManager, kc: AsyncKernelClient, code: str, *, timeout: float) -> dict[str, Any]:
    """Run ``code`` silently; return the execute reply; raise ``_KernelDied`` if the process ends."""
    msg_id = kc.execute(code, silent=True, store_history=False, allow_stdin=False)
    deadline = time.monotonic() + timeout
    while True:
        try:
            reply: dict[str, Any] = await kc.get_shell_msg(timeout=0.2)
        except queue.Empty:
            if not await km.is_alive():
                raise _KernelDied() from None
            if time.monotonic() > deadline:
                raise TimeoutError(f"no reply within {timeout:g} s") from None
            continue
        if reply.get("parent_header", {}).get("msg_id") == msg_id:
            return reply


def _error_text(reply: dict[str, Any]) -> str | None:
    content = reply.get("content", {})
    if content.get("status") == "ok":
        return None
    return f"{content.get('ename', 'error')}: {content.get('evalue', '')}"


async def _client(km: AsyncKernelManager, timeout: float) -> AsyncKernelClient:
    kc = km.client()
    kc.start_channels()
    try:
        await kc.wait_for_ready(timeout=timeout)
    except BaseException:
        kc.stop_channels()
        raise
    return kc


async def save_kernel(
    km: AsyncKernelManager, *, home: Path, from_mode: Mode, to_mode: Mode, timeout: float = 120.0
) -> SavedState:
    """Save the kernel's picklable variables under ``home``; raise ConflictError if it cannot."""
    state_id = new_state_id()
    code = (
        f"__import__({_MODULE!r}, fromlist=['_']).save_namespace(get_ipython().user_ns, home={str(home)!r}, "
        f"from_mode={str(from_mode)!r}, to_mode={str(to_mode)!r}, kernel_id={km.kernel_id!r}, state_id={state_id!r})"
    )
    busy_hint = "nothing was switched; wait for the running cell to finish (or interrupt it) and switch again"
    try:
        kc = await _client(km, timeout)
    except (RuntimeError, TimeoutError) as e:
        raise ConflictError(
            f"could not save the variables of kernel {km.kernel_id}: it does not answer ({e})", hint=busy_hint
        ) from None
    try:
        reply = await _execute(km, kc, code, timeout=timeout)
    except (_KernelDied, TimeoutError) as e:
        raise ConflictError(
            f"could not save the variables of kernel {km.kernel_id}: "
            + ("the kernel died" if isinstance(e, _KernelDied) else str(e)),
            hint=busy_hint,
        ) from None
    finally:
        kc.stop_channels()
    error = _error_text(reply)
    if error:
        raise ConflictError(
            f"could not save the variables of kernel {km.kernel_id}: {error}",
            hint="nothing was switched; is jupyter_starverse installed in the kernel's environment?",
        )
    return read_state(home, state_id)


async def restart_kernel(km: AsyncKernelManager, target: Mode, *, timeout: float = 120.0) -> None:
    """Restart the kernel with the environment of ``target`` and wait until it answers."""
    # jupyter_client keeps the launch arguments (including env) for restarts; we change
    # only the GPU visibility in them.
    launch_args = getattr(km, "_launch_args", None) or {}
    base = launch_args.get("env") or os.environ
    await km.restart_kernel(now=False, env=kernel_env(target, base))
    kc = await _client(km, timeout)
    kc.stop_channels()


async def restore_kernel(
    km: AsyncKernelManager, state: SavedState, *, home: Path, skip: tuple[str, ...] = (), timeout: float = 300.0
) -> RestoreReport:
    """Load ``state`` into the (new) kernel. If the kernel dies, the state stays on disk."""
    code = (
        "__import__('jupyter_starverse').load_ipython_extension(get_ipython())\n"  # %sv works again after restart
        f"__import__({_MODULE!r}, fromlist=['_']).restore_namespace(get_ipython().user_ns, "
        f"home={str(home)!r}, state_id={state.id!r}, skip={tuple(skip)!r})"
    )
    kept = f"the saved state stays at {state.path}"
    kc = await _client(km, timeout)
    try:
        reply = await _execute(km, kc, code, timeout=timeout)
    except _KernelDied:
        raise ConflictError(
            f"kernel {km.kernel_id} died while its variables were restored; {kept}",
            hint=f"restart the kernel and run `%sv mode restore {state.id} --skip NAME`, "
            "leaving out the variable that broke it",
        ) from None
    except TimeoutError as e:
        raise ConflictError(f"restoring kernel {km.kernel_id} did not finish: {e}; {kept}",
                            hint=f"run `%sv mode restore {state.id}` in the notebook") from None
    finally:
        kc.stop_channels()
    error = _error_text(reply)
    if error:
        raise ConflictError(f"restoring kernel {km.kernel_id} failed: {error}; {kept}",
                            hint=f"run `%sv mode restore {state.id}` in the notebook")
    return _read_report(home, state.id)


def _read_report(home: Path, state_id: str) -> RestoreReport:
    import json

    path = Path(home) / "modes" / "reports" / f"{state_id}.json"
    return RestoreReport.from_json(json.loads(path.read_text()))


async def switch_kernel(
    km: AsyncKernelManager, target: Mode, *, home: Path, from_mode: Mode, timeout: float = 120.0
) -> KernelSwitchReport:
    """Save, restart in ``target`` mode, restore. Errors after the save are reported, not raised."""
    saved = await save_kernel(km, home=home, from_mode=from_mode, to_mode=target, timeout=timeout)
    try:
        await restart_kernel(km, target, timeout=timeout)
        report = await restore_kernel(km, saved, home=home, timeout=timeout)
    except (ConflictError, RuntimeError, TimeoutError, asyncio.TimeoutError) as e:
        return KernelSwitchReport(km.kernel_id, saved, None, str(e))
    return KernelSwitchReport(km.kernel_id, saved, report)


async def switch_with_kernels(
    service: ModeService,
    plan: SwitchPlan,
    kernels: Mapping[str, AsyncKernelManager],
    *,
    timeout: float = 120.0,
) -> SwitchResult:
    """Switch the workspace and every kernel in ``kernels`` (a Jupyter server's kernels).

    Every kernel is saved first; if one cannot be saved (busy, dead) nothing is switched and
    the states already written are discarded, since those kernels still hold their variables.
    A local workspace then restarts each kernel in the new mode and restores it; a workspace
    that restarts as a whole (pod, Hub server) leaves the states on disk for ``mode restore``.
    """
    from jupyter_starverse.modes import SwitchResult, discard_state

    if not plan.changes:
        return SwitchResult(plan, None)
    home = service.settings.home
    saved: list[SavedState] = []
    try:
        for km in kernels.values():
            saved.append(await save_kernel(km, home=home, from_mode=plan.current, to_mode=plan.target, timeout=timeout))
        outcome = await asyncio.to_thread(service.apply, plan)
    except BaseException:
        for state in saved:
            with contextlib.suppress(StarverseError):  # the switch's own error is the one to show
                discard_state(home, state.id)
        raise
    if outcome is None or outcome.restarts_workspace:
        message = "when the workspace is back, run `%sv mode restore` in each notebook to get its variables"
        return SwitchResult(plan, outcome, saved=tuple(saved), message=message if saved else "")
    reports: list[KernelSwitchReport] = []
    for km, state in zip(kernels.values(), saved, strict=True):
        try:
            await restart_kernel(km, plan.target, timeout=timeout)
            reports.append(KernelSwitchReport(km.kernel_id, state, await restore_kernel(km, state, home=home)))
        except (ConflictError, RuntimeError, TimeoutError) as e:
            reports.append(KernelSwitchReport(km.kernel_id, state, None, str(e)))
    return SwitchResult(plan, outcome, kernels=tuple(reports))
