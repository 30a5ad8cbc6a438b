"""GPU or CPU: the workspace's mode, how to switch it, and how jobs follow it.

Front doors use only the names below. The jupyter_client side of a switch (saving and
restoring running kernels) belongs to the server (``server/_kernels.py``).
"""

from __future__ import annotations

from ..kube import NodePool, PoolTable, Toleration, load_pools
from ._idle import IdleNotice, WorkspaceIdleGuard, watch_idle
from ._jobs import SMOKE_STEPS, SmokeResult, make_smoke_spec, smoke_then_submit, translate_spec
from ._kernelstate import (
    RestoreReport,
    SavedState,
    discard_state,
    list_states,
    new_state_id,
    read_state,
    restore_namespace,
    save_namespace,
)
from ._mode import Mode
from ._notebook import ServerSwitch, restore_here, switch_here, switch_via_server
from ._plan import KernelSwitchReport, ModeStatus, PriceChange, SwitchPlan, SwitchResult
from ._state import ModeService
from ._switch import LocalSwitcher, SwitchOutcome, WorkspaceSwitcher, kernel_env
from ._switchers import detect_workspace, make_switcher

__all__ = [
    "SMOKE_STEPS",
    "IdleNotice",
    "KernelSwitchReport",
    "LocalSwitcher",
    "Mode",
    "ModeService",
    "ModeStatus",
    "NodePool",
    "PoolTable",
    "PriceChange",
    "RestoreReport",
    "SavedState",
    "ServerSwitch",
    "SmokeResult",
    "SwitchOutcome",
    "SwitchPlan",
    "SwitchResult",
    "Toleration",
    "WorkspaceIdleGuard",
    "WorkspaceSwitcher",
    "detect_workspace",
    "discard_state",
    "kernel_env",
    "list_states",
    "load_pools",
    "make_smoke_spec",
    "make_switcher",
    "new_state_id",
    "read_state",
    "restore_here",
    "restore_namespace",
    "save_namespace",
    "smoke_then_submit",
    "switch_here",
    "switch_via_server",
    "translate_spec",
    "watch_idle",
]
