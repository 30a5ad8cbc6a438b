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
import re
import shutil
import stat
import sys
import time
import types
import uuid
from collections.abc import MutableMapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from jupyter_starverse._format import html_pre, pretty_text
from jupyter_starverse.errors import BadInputError, NotFoundError, PermissionDeniedError, StoreError

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
_VAR_FILE_RE = re.compile(r"^(?:small|[0-9]{1,9})\.bin$")  # the only names save_namespace writes
_DIR_MODE = 0o700
_FILE_MODE = 0o600
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


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

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))

    def _repr_html_(self) -> str:
        return html_pre(str(self))


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

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))

    def _repr_html_(self) -> str:
        return html_pre(str(self))


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


def _check_id(state_id: object) -> str:
    """``state_id`` if it has the id format (no separators, no dots); BadInputError otherwise."""
    if not isinstance(state_id, str) or not _ID_RE.match(state_id):
        shown = repr(state_id)[:80]
        raise BadInputError(
            f"{shown} is not a valid state id",
            field="state_id",
            hint="a state id looks like 20260101-120000-0123abcd; `starverse mode --json` lists them",
        )
    return state_id


def _state_dir(home: Path | str, state_id: object) -> Path:
    """The folder of state ``state_id``: computed from the id alone, never from stored data.

    Raises BadInputError for a malformed id and NotFoundError when there is no such state
    folder (a symlink or a plain file in its place is not one).
    """
    folder = _state_root(Path(home)) / _check_id(state_id)
    try:
        info = folder.lstat()
    except FileNotFoundError:
        info = None
    except OSError as e:
        raise StoreError(
            f"cannot look at saved state {state_id}: {e}", hint="check the permissions of STARVERSE_HOME"
        ) from e
    if info is None or not stat.S_ISDIR(info.st_mode):
        what = "no" if info is None else "a link or file, not a"
        raise NotFoundError(
            f"saved state {state_id!r}: {what} saved state folder under {folder.parent}",
            hint="`starverse mode --json` lists the saved states",
        )
    return folder


def _make_private_dir(path: Path, *, exist_ok: bool = False) -> None:
    """Create ``path`` as a 0700 folder of this uid (an existing one must be ours and not a link)."""
    try:
        path.mkdir(mode=_DIR_MODE)
    except FileExistsError:
        if not exist_ok:
            raise
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise PermissionDeniedError(
            f"{path} is not a folder of this user; saved variables are not written there",
            hint="remove it, or point STARVERSE_HOME at a folder of your own",
        )
    path.chmod(_DIR_MODE)  # mkdir's mode went through the umask; set it exactly


def _write_private(path: Path, data: bytes) -> None:
    """Write a new file readable and writable only by this uid (0600 from its creation)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, _FILE_MODE)
    try:
        os.fchmod(fd, _FILE_MODE)  # before any byte goes in, whatever the umask
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _unsafe(info: os.stat_result) -> str | None:
    """Why a saved file or folder with this stat must not be trusted, or None."""
    if info.st_uid != os.geteuid():
        return f"it belongs to uid {info.st_uid}, not to this user (uid {os.geteuid()})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"other users may write to it (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def _refuse(state_id: str, path: Path, why: str) -> PermissionDeniedError:
    return PermissionDeniedError(
        f"saved state {state_id} is not restored: {path}: {why}",
        hint=f"only states this user wrote are loaded; delete it with `starverse mode discard {state_id}` "
        "if you do not trust it",
    )


def _check_private_dir(state_id: str, path: Path) -> None:
    try:
        info = path.lstat()
    except OSError as e:
        raise StoreError(f"saved state {state_id} cannot be read: {e}", hint=f"it stays at {path}") from e
    if not stat.S_ISDIR(info.st_mode):
        raise _refuse(state_id, path, "not a folder (a link or a file)")
    why = _unsafe(info)
    if why:
        raise _refuse(state_id, path, why)


def _check_var_files(state_id: str, vars_dir: Path, files: dict[str, Any], skip: tuple[str, ...]) -> None:
    """Refuse the whole state when any file it would load is not this user's own (checked again on read)."""
    for name, meta in files.items():
        filename = meta.get("file") if isinstance(meta, dict) else None
        if name in skip or not isinstance(filename, str) or not _VAR_FILE_RE.match(filename):
            continue
        try:
            info = (vars_dir / filename).lstat()
        except OSError:
            continue  # reported for that name when it is read
        if not stat.S_ISREG(info.st_mode):
            raise _refuse(state_id, vars_dir / filename, "not a regular file (a link?)")
        why = _unsafe(info)
        if why:
            raise _refuse(state_id, vars_dir / filename, why)


def _read_private(state_id: str, path: Path) -> bytes:
    """The bytes of a saved file: no link followed, owned by this uid, writable by no one else."""
    fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _refuse(state_id, path, "not a regular file")
        why = _unsafe(info)
        if why:
            raise _refuse(state_id, path, why)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


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
    state_id = _check_id(state_id or new_state_id())
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
        _make_private_dir(root, exist_ok=True)  # an older, 0755 root is made private too
        _make_private_dir(tmp)
        made_tmp = True
        _make_private_dir(tmp / "vars")
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
                _write_private(tmp / "vars" / filename, data)
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
        _write_private(tmp / "vars" / _SMALL_FILE, pickle.dumps(small, protocol=pickle.HIGHEST_PROTOCOL))
        _write_private(tmp / MANIFEST, json.dumps(manifest, indent=1).encode())
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
    root = _state_root(Path(home))
    out: list[SavedState] = []
    if not root.is_dir():
        return out
    for entry in root.iterdir():
        # Only real folders named like a state id; a link or a stray name is not a state.
        if not _ID_RE.match(entry.name) or entry.is_symlink() or not entry.is_dir():
            continue
        try:
            fd = os.open(entry / MANIFEST, os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
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
        _check_id(state_id)
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
    folder = _state_dir(home, state_id)
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
    folder = _state_dir(home, state.id)  # from the id, never from a path stored in the manifest
    vars_dir = folder / "vars"
    _check_private_dir(state.id, folder)
    _check_private_dir(state.id, vars_dir)
    try:
        manifest = json.loads(_read_private(state.id, folder / MANIFEST))
        files = manifest.get("files", {})
        if not isinstance(files, dict):
            raise ValueError("'files' is not a mapping")
    except (OSError, ValueError, AttributeError) as e:
        raise StoreError(f"saved state {state.id} cannot be read: {e}", hint=f"it stays at {folder}") from e
    _check_var_files(state.id, vars_dir, files, skip)  # before anything is unpickled
    restored: list[str] = []
    failed: dict[str, str] = {}
    packed: dict[str, bytes] | None = None
    for name, meta in files.items():
        if name in skip:
            failed[name] = "skipped on request"
            continue
        try:
            filename = meta["file"]
            if not isinstance(filename, str) or not _VAR_FILE_RE.match(filename):
                raise BadInputError(f"the manifest names the file {str(filename)[:80]!r}, not one a save writes")
            if filename == _SMALL_FILE:
                if packed is None:
                    packed = pickle.loads(_read_private(state.id, vars_dir / _SMALL_FILE))  # noqa: S301 - checked ours
                data = packed[name]
            else:
                data = _read_private(state.id, vars_dir / filename)
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
