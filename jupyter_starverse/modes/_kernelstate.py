"""Keep a kernel's work across a mode switch: save picklable variables, restore them later.

These functions run *inside* the kernel (the switcher executes them there, or the ``%sv``
magic calls them directly). They work on a plain namespace dict so they are testable
without a kernel. A saved state is a folder ``<home>/modes/saved/<id>/`` holding one file
per variable and a ``manifest.json``; it is published with a rename (never half visible)
and deleted only once every saved name was restored, so a kernel that dies during restore
loses nothing.

Tensors are written with ``torch.save`` and read back with ``map_location="cpu"``, so a
tensor or model that lived on a GPU comes back on the CPU of any node.
"""

from __future__ import annotations

import io
import json
import pickle
import re
import shutil
import sys
import time
import types
import uuid
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_starverse.errors import BadInputError, NotFoundError, StoreError

__all__ = [
    "RestoreReport",
    "SavedState",
    "discard_state",
    "last_report",
    "list_states",
    "new_state_id",
    "read_state",
    "restore_namespace",
    "save_namespace",
]

MANIFEST = "manifest.json"
# IPython's own bookkeeping; never user work.
_IPYTHON_NAMES = frozenset({"In", "Out", "exit", "quit", "get_ipython", "open"})
_MAX_REASON = 200
_SMALL = 256 * 1024  # values smaller than this share one file
_SMALL_FILE = "small.bin"
_ID_RE = re.compile(r"^[0-9]{8}-[0-9]{6}-[0-9a-f]{8}$")


@dataclass(frozen=True)
class SavedState:
    """A saved kernel namespace waiting on disk to be restored.

    ``not_kept`` maps each name that could not be saved to the reason, in words.
    """

    id: str
    path: str
    created: float
    names: tuple[str, ...]
    not_kept: dict[str, str] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    from_mode: str = ""
    to_mode: str = ""
    kernel_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "path": self.path,
            "created": self.created,
            "names": list(self.names),
            "not_kept": dict(self.not_kept),
            "notes": dict(self.notes),
            "from_mode": self.from_mode,
            "to_mode": self.to_mode,
            "kernel_id": self.kernel_id,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SavedState:
        return cls(
            id=str(data["id"]),
            path=str(data["path"]),
            created=float(data["created"]),
            names=tuple(data.get("names", ())),
            not_kept=dict(data.get("not_kept", {})),
            notes=dict(data.get("notes", {})),
            from_mode=str(data.get("from_mode", "")),
            to_mode=str(data.get("to_mode", "")),
            kernel_id=data.get("kernel_id"),
        )

    def __str__(self) -> str:
        lines = [f"saved {len(self.names)} name(s): {', '.join(self.names) or '-'}"]
        lines += [f"  {name}: {note}" for name, note in self.notes.items()]
        if self.not_kept:
            lines.append("not kept:")
            lines += [f"  {name}: {why}" for name, why in self.not_kept.items()]
        return "\n".join(lines)


@dataclass(frozen=True)
class RestoreReport:
    """What a restore brought back into the kernel and what it could not."""

    state_id: str
    restored: tuple[str, ...]
    failed: dict[str, str] = field(default_factory=dict)
    not_kept: dict[str, str] = field(default_factory=dict)
    kept_on_disk: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "state_id": self.state_id,
            "restored": list(self.restored),
            "failed": dict(self.failed),
            "not_kept": dict(self.not_kept),
            "kept_on_disk": self.kept_on_disk,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RestoreReport:
        return cls(
            state_id=str(data["state_id"]),
            restored=tuple(data.get("restored", ())),
            failed=dict(data.get("failed", {})),
            not_kept=dict(data.get("not_kept", {})),
            kept_on_disk=data.get("kept_on_disk"),
        )

    def __str__(self) -> str:
        lines = [f"restored {len(self.restored)} name(s): {', '.join(self.restored) or '-'}"]
        if self.failed:
            lines.append("could not restore:")
            lines += [f"  {name}: {why}" for name, why in self.failed.items()]
        if self.not_kept:
            lines.append("not kept across the switch:")
            lines += [f"  {name}: {why}" for name, why in self.not_kept.items()]
        if self.kept_on_disk:
            lines.append(f"the saved state stays at {self.kept_on_disk}")
        return "\n".join(lines)


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_REASON else text[: _MAX_REASON - 3] + "..."


def _skip(name: str) -> bool:
    """Names that are the kernel's own (history, ``In``/``Out``, helpers): skipped silently."""
    return name.startswith("_") or name in _IPYTHON_NAMES


def _why_not(value: object) -> str | None:
    """A reason in words when ``value`` can obviously not survive a new process."""
    if isinstance(value, types.ModuleType):
        return "module (import it again after the switch)"
    if isinstance(value, io.IOBase) or type(value).__name__ in ("TextIOWrapper", "BufferedReader", "BufferedWriter"):
        return "open file handle (open the file again after the switch)"
    if isinstance(value, types.GeneratorType | types.CoroutineType | types.AsyncGeneratorType):
        return "generator or coroutine (its progress lives only in this process)"
    if isinstance(value, types.FunctionType) and value.__name__ == "<lambda>":
        return "lambda function (define it again after the switch)"
    if isinstance(value, types.FunctionType | type) and getattr(value, "__module__", None) == "__main__":
        return "defined in the notebook (run its cell again after the switch)"
    return None


def _torch() -> Any | None:
    # Only when the kernel already imported torch: never pull it in just to save ints.
    return sys.modules.get("torch")


def _notebook_model(value: object, torch: Any | None) -> bool:
    return torch is not None and isinstance(value, torch.nn.Module) and type(value).__module__ == "__main__"


class _HoldsTensors(Exception):
    pass


class _PlainPickler(pickle.Pickler):
    """Pickles values that hold no torch tensors; raises ``_HoldsTensors`` as soon as one does."""

    def __init__(self, file: io.BytesIO, torch: Any) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._torch = torch

    def reducer_override(self, obj: Any) -> Any:
        t = self._torch
        if isinstance(obj, t.Tensor | t.nn.Module) or t.is_storage(obj):
            raise _HoldsTensors
        return NotImplemented


def _dump(value: object, torch: Any | None) -> tuple[bytes, str]:
    # Plain pickle is much cheaper per value; torch.save only for values holding tensors,
    # so they can be loaded back onto the CPU of any node (map_location="cpu").
    buf = io.BytesIO()
    if torch is None:
        pickle.dump(value, buf, protocol=pickle.HIGHEST_PROTOCOL)
        return buf.getvalue(), "pickle"
    try:
        _PlainPickler(buf, torch).dump(value)
        return buf.getvalue(), "pickle"
    except _HoldsTensors:
        buf = io.BytesIO()
        torch.save(value, buf)
        return buf.getvalue(), "torch"


def new_state_id() -> str:
    """A fresh, sortable state id."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:8]


def _state_root(home: Path) -> Path:
    return home / "modes" / "saved"


def save_namespace(
    namespace: MutableMapping[str, Any],
    *,
    home: Path | str,
    from_mode: str = "",
    to_mode: str = "",
    kernel_id: str | None = None,
    state_id: str | None = None,
) -> SavedState:
    """Save every picklable user variable of ``namespace`` under ``home``.

    Parameters
    ----------
    namespace
        The kernel's user namespace (``get_ipython().user_ns``).
    home
        ``Settings.home``; the state goes to ``<home>/modes/saved/<id>/``.
    from_mode, to_mode, kernel_id
        Recorded in the manifest so the restore can say what happened.
    state_id
        Id of the new state (a fresh one when omitted).

    Returns
    -------
    SavedState
        The published state; ``not_kept`` says which names were left out and why.
    """
    torch = _torch()
    root = _state_root(Path(home))
    state_id = state_id or new_state_id()
    if not _ID_RE.match(state_id):
        raise BadInputError(f"{state_id!r} is not a valid state id", field="state_id")
    tmp = root / f".{state_id}.tmp"
    final = root / state_id
    names: list[str] = []
    files: dict[str, dict[str, str]] = {}
    small: dict[str, bytes] = {}
    not_kept: dict[str, str] = {}
    notes: dict[str, str] = {}
    try:
        (tmp / "vars").mkdir(parents=True)
        for index, (name, value) in enumerate(list(namespace.items())):
            if _skip(name):
                continue
            reason = _why_not(value)
            if reason:
                not_kept[name] = reason
                continue
            target, saved_value = name, value
            if _notebook_model(value, torch):
                # The class lives in the notebook and will not exist in the new kernel;
                # its weights do: keep them under a name that says so.
                target, saved_value = f"{name}_state_dict", value.state_dict()  # type: ignore[attr-defined]
                notes[target] = (
                    f"{name} is a model whose class {type(value).__name__} is defined in the notebook; "
                    f"its weights are kept as {target} (run the class cell, then {name}.load_state_dict({target}))"
                )
            if torch is not None and isinstance(value, torch.Tensor) and value.requires_grad and not value.is_leaf:
                # A tensor in the middle of an autograd graph cannot be saved; its values can.
                saved_value = value.detach()
                notes[name] = "kept without its autograd graph (detached)"
            try:
                data, fmt = _dump(saved_value, torch)
            except Exception as e:  # any pickling failure is a per-name outcome, not an abort
                not_kept[name] = _short(f"cannot be pickled: {type(e).__name__}: {e}")
                continue
            kind = f"{type(value).__module__}.{type(value).__qualname__}"
            if len(data) < _SMALL:
                # Creating a file costs more than writing KBs on many volumes: pack small values.
                small[target] = data
                files[target] = {"file": _SMALL_FILE, "format": fmt, "type": kind}
            else:
                filename = f"{index}.bin"
                (tmp / "vars" / filename).write_bytes(data)
                files[target] = {"file": filename, "format": fmt, "type": kind}
            names.append(target)
        state = SavedState(
            id=state_id,
            path=str(final),
            created=time.time(),
            names=tuple(names),
            not_kept=not_kept,
            notes=notes,
            from_mode=from_mode,
            to_mode=to_mode,
            kernel_id=kernel_id,
        )
        manifest = state.to_json() | {"files": files}
        (tmp / "vars" / _SMALL_FILE).write_bytes(pickle.dumps(small, protocol=pickle.HIGHEST_PROTOCOL))
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
        tmp.replace(final)
    except OSError as e:
        raise StoreError(
            f"could not save the kernel's variables under {root}: {e}",
            hint="free disk space or fix permissions on STARVERSE_HOME; nothing was switched",
        ) from e
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return state


def list_states(home: Path | str) -> list[SavedState]:
    """Saved states still waiting to be restored, newest first."""
    root = _state_root(Path(home))
    out: list[SavedState] = []
    if not root.is_dir():
        return out
    for entry in root.iterdir():
        if entry.name.startswith("."):
            continue
        try:
            out.append(SavedState.from_json(json.loads((entry / MANIFEST).read_text())))
        except (OSError, ValueError, KeyError):
            continue
    return sorted(out, key=lambda s: s.created, reverse=True)


def read_state(home: Path | str, state_id: str | None = None, *, kernel_id: str | None = None) -> SavedState:
    """One saved state by id, or the newest one (of ``kernel_id`` when given)."""
    states = list_states(home)
    if state_id is not None:
        states = [s for s in states if s.id == state_id]
    elif kernel_id is not None:
        states = [s for s in states if s.kernel_id in (kernel_id, None)]
    if not states:
        what = f"saved state {state_id!r}" if state_id else "saved kernel state"
        raise NotFoundError(f"no {what} to restore", hint="`starverse mode --json` lists the saved states")
    return states[0]


def discard_state(home: Path | str, state_id: str) -> None:
    """Delete a saved state (after a switch that did not happen, or on the user's request)."""
    state = read_state(home, state_id)
    shutil.rmtree(state.path, ignore_errors=True)


def last_report(home: Path | str) -> RestoreReport | None:
    """The newest restore report, or None."""
    reports = sorted((Path(home) / "modes" / "reports").glob("*.json"), key=lambda p: (p.stat().st_mtime, p.name))
    for path in reversed(reports):
        try:
            return RestoreReport.from_json(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError):
            continue
    return None


def restore_namespace(
    namespace: MutableMapping[str, Any],
    *,
    home: Path | str,
    state_id: str | None = None,
    kernel_id: str | None = None,
    skip: tuple[str, ...] = (),
) -> RestoreReport:
    """Load a saved state into ``namespace``; delete it from disk once every name is back.

    Names that fail to load are reported in ``failed`` and the state stays on disk.
    Names in ``skip`` are not loaded (for a variable that broke an earlier restore); they
    are reported in ``failed`` as skipped.
    """
    state = read_state(home, state_id, kernel_id=kernel_id)
    folder = Path(state.path)
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError) as e:
        raise StoreError(f"saved state {state.id} cannot be read: {e}", hint=f"it stays at {folder}") from e
    restored: list[str] = []
    failed: dict[str, str] = {}
    packed: dict[str, bytes] | None = None
    for name, meta in manifest.get("files", {}).items():
        if name in skip:
            failed[name] = "skipped on request"
            continue
        try:
            if meta["file"] == _SMALL_FILE:
                if packed is None:
                    packed = pickle.loads((folder / "vars" / _SMALL_FILE).read_bytes())  # noqa: S301 - our own file
                data = packed[name]
            else:
                data = (folder / "vars" / meta["file"]).read_bytes()
            if meta.get("format") == "torch":
                import torch  # saved with torch: the new kernel has it too

                value = torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)
            else:
                value = pickle.loads(data)  # noqa: S301 - our own file, written by save_namespace
        except Exception as e:  # one bad variable must not stop the others
            failed[name] = _short(f"{type(e).__name__}: {e}")
            continue
        namespace[name] = value
        restored.append(name)
    kept = None
    if failed and set(failed) - set(skip):
        kept = str(folder)
    else:
        shutil.rmtree(folder, ignore_errors=True)
    report = RestoreReport(state.id, tuple(restored), failed, dict(state.not_kept), kept)
    reports = Path(home) / "modes" / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    (reports / f"{state.id}.json").write_text(json.dumps(report.to_json()))
    return report
