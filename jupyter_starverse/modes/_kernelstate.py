"""Keep a kernel's work across a mode switch: save picklable variables, restore them later.

These functions run *inside* the kernel (the switcher executes them there, or the ``%sv``
magic calls them directly). They work on a plain namespace dict so they are testable
without a kernel. A saved state is a folder ``<home>/modes/saved/<id>/`` holding one file
per variable and a ``manifest.json``; it is published with a rename (never half visible)
and deleted only once every saved name was restored, so a kernel that dies during restore
loses nothing.

Saved variables are private: the states root and every state folder are ``0700``, every file
``0600``, created with those modes (never widened by the umask, never chmod-ed after the data
is in). A state is found only from its id (checked against the id format) under the states
root, never from a path stored in its manifest; restore refuses a folder or file that another
uid owns or that others may write, so it never unpickles what another identity wrote.

Tensors are written with ``torch.save`` and read back with ``map_location="cpu"``, so a
tensor or model that lived on a GPU comes back on the CPU of any node.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import sys
import time
import types
from collections.abc import MutableMapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from jupyter_starverse.errors import BadInputError, NotFoundError, PermissionDeniedError, StoreError

from ._plan import RestoreReport, SavedState
from ._private import (
    CLOEXEC,
    ID_RE,
    NOFOLLOW,
    VAR_FILE_RE,
    check_id,
    check_private_dir,
    check_var_files,
    make_private_dir,
    new_state_id,
    read_private,
    state_dir,
    state_root,
    write_private,
)

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
    root = state_root(Path(home))
    state_id = check_id(state_id or new_state_id())
    tmp = root / f".{state_id}.tmp"
    final = root / state_id
    names: list[str] = []
    files: dict[str, dict[str, str]] = {}
    small: dict[str, bytes] = {}
    not_kept: dict[str, str] = {}
    notes: dict[str, str] = {}
    made_tmp = False
    try:
        root.parent.mkdir(parents=True, exist_ok=True)
        make_private_dir(root, exist_ok=True)  # an older, 0755 root is made private too
        make_private_dir(tmp)
        made_tmp = True
        make_private_dir(tmp / "vars")
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
                write_private(tmp / "vars" / filename, data)
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
        write_private(tmp / "vars" / _SMALL_FILE, pickle.dumps(small, protocol=pickle.HIGHEST_PROTOCOL))
        write_private(tmp / MANIFEST, json.dumps(manifest, indent=1).encode())
        tmp.replace(final)
    except OSError as e:
        raise StoreError(
            f"could not save the kernel's variables under {root}: {e}",
            hint="free disk space or fix permissions on STARVERSE_HOME; nothing was switched",
        ) from e
    finally:
        if made_tmp:  # never remove a folder this call did not create
            shutil.rmtree(tmp, ignore_errors=True)
    return state


def list_states(home: Path | str) -> list[SavedState]:
    """Saved states still waiting to be restored, newest first."""
    root = state_root(Path(home))
    out: list[SavedState] = []
    if not root.is_dir():
        return out
    for entry in root.iterdir():
        # Only real folders named like a state id; a link or a stray name is not a state.
        if not ID_RE.match(entry.name) or entry.is_symlink() or not entry.is_dir():
            continue
        try:
            fd = os.open(entry / MANIFEST, os.O_RDONLY | NOFOLLOW | CLOEXEC)
            with os.fdopen(fd, "rb") as fh:
                data = json.loads(fh.read())
            state = SavedState.from_json(data)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        # Where a state lives follows from its id, never from what its manifest says.
        out.append(replace(state, id=entry.name, path=str(entry)))
    return sorted(out, key=lambda s: s.created, reverse=True)


def read_state(home: Path | str, state_id: str | None = None, *, kernel_id: str | None = None) -> SavedState:
    """One saved state by id, or the newest one (of ``kernel_id`` when given).

    A malformed ``state_id`` (separators, dots, anything but the id format) is a BadInputError.
    """
    if state_id is not None:
        check_id(state_id)
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
    """Delete a saved state (after a switch that did not happen, or on the user's request).

    Only the folder ``<home>/modes/saved/<state_id>`` is removed: it is found from the id
    alone (BadInputError for a malformed id, NotFoundError when it is missing or a link);
    a ``path`` written in its manifest is ignored.
    """
    folder = state_dir(home, state_id)
    try:
        shutil.rmtree(folder)  # does not follow links inside the folder
    except FileNotFoundError:
        pass
    except OSError as e:
        raise StoreError(f"could not delete saved state {state_id}: {e}", hint=f"remove {folder} by hand") from e


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
    folder = state_dir(home, state.id)  # from the id, never from a path stored in the manifest
    vars_dir = folder / "vars"
    check_private_dir(state.id, folder)
    check_private_dir(state.id, vars_dir)
    try:
        manifest = json.loads(read_private(state.id, folder / MANIFEST))
        files = manifest.get("files", {})
        if not isinstance(files, dict):
            raise ValueError("'files' is not a mapping")
    except (OSError, ValueError, AttributeError) as e:
        raise StoreError(f"saved state {state.id} cannot be read: {e}", hint=f"it stays at {folder}") from e
    check_var_files(state.id, vars_dir, files, skip)  # before anything is unpickled
    restored: list[str] = []
    failed: dict[str, str] = {}
    packed: dict[str, bytes] | None = None
    for name, meta in files.items():
        if name in skip:
            failed[name] = "skipped on request"
            continue
        try:
            filename = meta["file"]
            if not isinstance(filename, str) or not VAR_FILE_RE.match(filename):
                raise BadInputError(f"the manifest names the file {str(filename)[:80]!r}, not one a save writes")
            if filename == _SMALL_FILE:
                if packed is None:
                    packed = pickle.loads(read_private(state.id, vars_dir / _SMALL_FILE))  # noqa: S301 - checked ours
                data = packed[name]
            else:
                data = read_private(state.id, vars_dir / filename)
            if meta.get("format") == "torch":
                import torch  # saved with torch: the new kernel has it too

                value = torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)
            else:
                value = pickle.loads(data)  # noqa: S301 - our own file, written by save_namespace
        except PermissionDeniedError:
            raise  # a file another identity could have written: load nothing more from this state
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
