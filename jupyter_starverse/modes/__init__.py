"""GPU or CPU: the workspace's mode, how to switch it, and how jobs follow it."""

from __future__ import annotations

from ._jobs import SmokeResult, make_smoke_spec, smoke_then_submit, translate_spec
from ._kernelstate import RestoreReport, SavedState, restore_namespace, save_namespace
from ._plan import ModeStatus, PriceChange, SwitchPlan, SwitchResult
from ._pools import NodePool, PoolTable, Toleration, load_pools
from ._state import Mode, ModeService
from ._switch import LocalSwitcher, SwitchOutcome, WorkspaceSwitcher, kernel_env, make_switcher

__all__ = [
    "LocalSwitcher",
    "Mode",
    "ModeService",
    "ModeStatus",
    "NodePool",
    "PoolTable",
    "PriceChange",
    "RestoreReport",
    "SavedState",
    "SmokeResult",
    "SwitchOutcome",
    "SwitchPlan",
    "SwitchResult",
    "Toleration",
    "WorkspaceSwitcher",
    "kernel_env",
    "load_pools",
    "make_smoke_spec",
    "make_switcher",
    "restore_namespace",
    "save_namespace",
    "smoke_then_submit",
    "translate_spec",
]
