"""The job index: one cached summary per run folder, so a job list never reads 10,000 folders.

::

    <experiments>/.jobindex/
        index.json     every run's summary, with the size and mtime of the files it came from
        changes.log    one line per run whose spec/status/record was rewritten (append-only)

A summary is what a job list shows (id, name, backend, state, topology, times, restarts,
cost); it comes from the run's ``spec.json``, ``status.json`` (local, Slurm) and backend
record (``kubernetes.json``, ``slurm.json``). It is re-read when one of those files changed
(size or mtime), so the index heals from any writer, old or foreign.

How a change is seen:

- every :func:`~jupyter_starverse.experiments.write_json` of one of those files appends the
  run folder to ``changes.log`` (``O_APPEND``: lines of concurrent writers never mix), so a
  long-lived reader (the server) re-reads just those runs;
- a new or removed run folder changes the mtime of its experiment's ``runs/`` folder;
- every ``sweep_every`` seconds, and always in a new process, the mtimes of every run's files
  are compared (a ``stat`` per file: about 3 ms per 1,000 runs).

``index.json`` is written with temp + rename: readers never see half of it, concurrent
writers each write a whole, correct index (the last one wins; anything it missed is seen by
the next sweep). A missing, unreadable or foreign-version index is rebuilt from the folders.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_starverse._volume import GROUP, PRIVATE, make_dir, write_atomic
from jupyter_starverse.errors import BadInputError

from ._journal import _JOURNAL, INDEX_DIR, WATCHED, note_change
from ._modes import folder_modes
from ._status import RunStatus

__all__ = [
    "INDEX_DIR",
    "JobIndex",
    "JobPage",
    "JobSummary",
    "inspect_run",
    "note_change",
    "page_etag",
    "skipped_text",
    "summarize_run",
]

_VERSION = 5  # 5: the rows carry the mounted versions
_INCOMPLETE_S = 60.0  # a run folder without a spec this young is being created, not broken
_NO_SPEC = "no spec.json"
_RECORDS = {"kubernetes.json": "kubernetes", "slurm.json": "slurm"}
_FINISHED = ("succeeded", "failed", "cancelled")
_JOURNAL_MAX = 1 << 20  # bytes; beyond this the journal starts again (a sweep covers the gap)


@dataclass(frozen=True)
class JobSummary:
    """One row of a job list: what ``jobs ls`` and the panel's job list show without opening the run."""

    id: str
    backend: str
    name: str
    title: str
    experiment: str
    run_dir: str
    state: str
    created: float
    started: float | None = None
    finished: float | None = None
    reason: str | None = None
    nodes: int = 1
    procs_per_node: int = 1
    template: str = ""
    accelerator: str = ""
    steps: int | None = None
    restarts: int = 0
    cost: str | None = None
    #: the exact ``NAME@VERSION`` each mount read (pinned at launch; a bare name in older specs)
    mounts: tuple[str, ...] = ()

    @property
    def is_finished(self) -> bool:
        return self.state in _FINISHED

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "backend": self.backend,
            "name": self.name,
            "title": self.title,
            "experiment": self.experiment,
            "experiment_dir": self.run_dir,
            "state": self.state,
            "created": self.created,
            "started": self.started,
            "finished": self.finished,
            "reason": self.reason,
            "nodes": self.nodes,
            "procs_per_node": self.procs_per_node,
            "template": self.template,
            "accelerator": self.accelerator,
            "steps": self.steps,
            "restarts": self.restarts,
            "cost": self.cost,
            "mounts": list(self.mounts),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JobSummary:
        return cls(
            id=str(data["id"]),
            backend=str(data["backend"]),
            name=str(data["name"]),
            title=str(data.get("title") or data["name"]),
            experiment=str(data["experiment"]),
            run_dir=str(data["experiment_dir"]),
            state=str(data["state"]),
            created=float(data.get("created") or 0.0),
            started=_num(data.get("started")),
            finished=_num(data.get("finished")),
            reason=data.get("reason"),
            nodes=int(data.get("nodes") or 1),
            procs_per_node=int(data.get("procs_per_node") or 1),
            template=str(data.get("template") or ""),
            accelerator=str(data.get("accelerator") or ""),
            steps=data.get("steps") if isinstance(data.get("steps"), int) else None,
            restarts=int(data.get("restarts") or 0),
            cost=data.get("cost"),
            mounts=tuple(str(m) for m in data.get("mounts") or ()),
        )


def _mounted(spec: dict[str, Any]) -> tuple[str, ...]:
    """``JobSpec.mounted`` of a spec read as JSON: each mount as the exact version it was pinned to."""
    mounts, versions = spec.get("mounts") or (), spec.get("mount_versions") or {}
    if not isinstance(mounts, list) or not isinstance(versions, dict):
        return ()
    return tuple(str(versions.get(m, m)) for m in mounts if isinstance(m, str))


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class JobPage:
    """One page of a filtered job list, newest first: ``total`` rows matched, ``items`` from ``offset``."""

    items: tuple[JobSummary, ...]
    total: int
    offset: int
    limit: int | None
    etag: str
    notes: tuple[str, ...] = ()
    #: Run folders left out of the list, one ``folder: why`` each (malformed, foreign, half-written).
    warnings: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "items": [s.to_json() for s in self.items],
            "total": self.total,
            "offset": self.offset,
            "limit": self.limit,
            "etag": self.etag,
            "notes": list(self.notes),
            "warnings": list(self.warnings),
        }


def skipped_text(warnings: Sequence[str], *, shown: int = 3) -> str | None:
    """The footer of a list that left folders out: ``2 run folders skipped: a: why; b: why``."""
    if not warnings:
        return None
    head = "; ".join(warnings[:shown]) + (f"; and {len(warnings) - shown} more" if len(warnings) > shown else "")
    return f"{len(warnings)} run folder{'s' if len(warnings) != 1 else ''} skipped: {head}"


@dataclass
class _Entry:
    folder: int  # mtime_ns of the run folder: unchanged while no file in it was created, renamed or removed
    sig: tuple[tuple[str, int, int], ...]  # (file, size, mtime_ns) of each watched file present
    row: list[Any] | None  # the summary as a compact row (see _ROW); None: a folder that is not (yet) a job
    warning: str | None = None  # why the folder is left out (or what of it was ignored)


@dataclass
class _State:
    entries: dict[str, _Entry] = field(default_factory=dict)  # run folder relative to the root
    runs_mtimes: dict[str, int] = field(default_factory=dict)  # experiment -> mtime_ns of its runs/
    exp_warnings: dict[str, str] = field(default_factory=dict)  # experiment -> why its runs cannot be listed
    journal_pos: int = 0
    journal_ino: int = 0
    swept: float = 0.0  # time.monotonic() of the last full sweep
    generation: int = 0  # bumped whenever a summary changed, appeared or went away
    loaded_mtime: int = 0  # mtime_ns of index.json when we last read or wrote it


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_MAX_RECORD = 16 << 20  # bytes; a spec with inline code may be large, a bigger "record" is not one


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class _Skip(Exception):
    """A run folder that is not listed, and why."""


def _read_record(path: Path, owner: int) -> tuple[bool, Any]:
    """``(present, data)`` of one file of a run folder; :class:`_Skip` when it cannot be believed."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False, None
    except OSError as e:
        raise _Skip(f"{path.name}: {e.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise _Skip(f"{path.name} is a symbolic link")
    if not stat.S_ISREG(st.st_mode):
        raise _Skip(f"{path.name} is not a file")
    if st.st_uid not in (owner, 0):
        raise _Skip(f"{path.name} was written by uid {st.st_uid}, not by the run's owner (uid {owner})")
    if st.st_size > _MAX_RECORD:
        raise _Skip(f"{path.name} is {st.st_size:,} bytes, too large for a record")
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise _Skip(f"{path.name}: {e.strerror}") from None
    if not raw.strip():
        raise _Skip(f"{path.name} is empty")
    try:
        data = json.loads(raw)
    except ValueError:
        raise _Skip(f"{path.name} is not JSON") from None
    if not isinstance(data, dict):
        raise _Skip(f"{path.name} is not a JSON object")
    return True, data


def _signature(run: str) -> tuple[tuple[str, int, int], ...]:
    out = []
    base = str(run)
    for name in WATCHED:
        try:
            st = os.lstat(f"{base}/{name}")
        except OSError:
            continue
        out.append((name, st.st_size, st.st_mtime_ns))
    return tuple(out)


def summarize_run(run: Path, experiment: str) -> JobSummary | None:
    """The summary of one run folder from its files; ``None`` when it is not a job (yet)."""
    return inspect_run(run, experiment)[0]


SpecCheck = Callable[[dict[str, Any]], object]


def inspect_run(run: Path, experiment: str, check: SpecCheck | None = None) -> tuple[JobSummary | None, str | None]:
    """The summary of one run folder and, when it is left out (or part of it ignored), why.

    Nothing in the folder is trusted: a link, a file another uid wrote in the owner's folder,
    a file that is not JSON, a spec that ``check`` (the job model's validation) refuses, all
    leave the folder out with a reason. ``(None, None)``: a folder being created right now.
    """
    try:
        st = os.lstat(run)
    except OSError as e:
        return None, f"{e.strerror}"
    if stat.S_ISLNK(st.st_mode):
        return None, "a symbolic link, not a run folder"
    if not stat.S_ISDIR(st.st_mode):
        return None, "not a folder"
    try:
        return _inspect(run, experiment, st.st_uid, check)
    except _Skip as e:
        return None, str(e)


def _inspect(run: Path, experiment: str, owner: int, check: SpecCheck | None) -> tuple[JobSummary | None, str | None]:
    if not os.access(run, os.R_OK | os.X_OK):
        raise _Skip(f"not readable (it belongs to uid {owner})")
    record_name, record = None, {}
    for name in _RECORDS:
        present, data = _read_record(run / name, owner)
        if present:
            record_name, record = name, data
            break
    has_spec, spec = _read_record(run / "spec.json", owner)
    if not has_spec:
        spec = record.get("spec")
        if spec is None and not record_name:
            raise _Skip(_NO_SPEC)
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or not spec.get("name"):
        raise _Skip("spec.json has no job name")
    if check is not None:
        try:
            check(spec)
        except Exception as e:  # the job model's refusal, whatever it is: the folder is left out
            raise _Skip(f"spec.json: {getattr(e, 'message', None) or e}") from None
    note = None
    try:
        _, status = _read_record(run / "status.json", owner)
    except _Skip as e:
        if "written by uid" not in str(e):
            raise
        status, note = None, f"{e}; ignored"  # a forged status: the job is listed without it
    status = status if isinstance(status, dict) else {}
    if status:
        try:
            RunStatus.from_json(status)  # what the backend reads next: a status it cannot read is not listed
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
            raise _Skip(f"status.json is not a run status ({type(e).__name__}: {str(e)[:120]})") from None
    final_record = record.get("final")
    final: dict[str, Any] = final_record if isinstance(final_record, dict) else {}
    backend = _RECORDS.get(record_name or "", "local")
    if status:
        state = str(status.get("state") or "pending")
        created = _num(status.get("created")) or _num(record.get("created")) or 0.0
        started, finished, reason = status.get("started"), status.get("finished"), status.get("reason")
    elif final:
        state = str(final.get("state") or "running")
        created = _num(record.get("created")) or 0.0
        started, finished, reason = final.get("started"), final.get("finished"), final.get("reason")
    else:  # a cluster job that has not finished: its backend knows the live state
        state = "running" if record.get("slurm_job_id") or backend == "kubernetes" else "pending"
        created = _num(record.get("created")) or 0.0
        started = finished = reason = None
    if (run / "cancel.json").is_file() and state not in _FINISHED and backend == "kubernetes":
        state = "cancelled"
    try:
        restarts = int(status.get("restarts") or final.get("restarts") or 0)
        nodes = int(spec.get("nodes") or 1)
        procs = int(spec.get("procs_per_node") or 1)
        created = float(created)
        if not (nodes >= 1 and procs >= 1 and restarts >= 0):
            raise ValueError("nodes, procs_per_node and restarts must be positive")
    except (TypeError, ValueError, OverflowError) as e:
        raise _Skip(f"not a job record ({e})") from None
    summary = JobSummary(
        id=run.name,
        backend=backend,
        name=str(spec["name"]),
        title=str(spec.get("display_name") or spec["name"]),
        experiment=experiment,
        run_dir=str(run),
        state=state,
        created=created,
        started=_num(started),
        finished=_num(finished),
        reason=reason if isinstance(reason, str) else None,
        nodes=nodes,
        procs_per_node=procs,
        template=str(spec.get("template") or ""),
        accelerator=str(spec.get("accelerator") or ""),
        steps=spec.get("steps") if isinstance(spec.get("steps"), int) else None,
        restarts=restarts,
        cost=status.get("cost") if isinstance(status.get("cost"), str) else None,
        mounts=_mounted(spec),
    )
    try:
        json.dumps(summary.to_json(), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise _Skip(f"not a job record ({e})") from None
    return summary, note


class JobIndex:
    """Cached summaries of every run folder under ``root``, kept current (see the module doc).

    One object may serve many threads (the server keeps one per experiments root).

    Parameters
    ----------
    root
        The experiments root (``STARVERSE_EXPERIMENTS``).
    sweep_every
        Seconds between two full mtime sweeps of a long-lived index (a new one sweeps first).
    check
        Validates a run's spec (the job model's ``JobSpec.from_json``); a folder whose spec it
        refuses is left out of the list with a warning instead of failing the list.

    Each uid keeps its own ``index-<uid>.json`` (a cache another user wrote is not believed);
    the journal is shared.
    """

    def __init__(self, root: Path, *, sweep_every: float = 30.0, check: SpecCheck | None = None) -> None:
        self.root = Path(root)
        self._root = str(self.root)
        self.sweep_every = sweep_every
        self.check = check
        self._index_name = f"index-{os.geteuid() if hasattr(os, 'geteuid') else 0}.json"
        self._state: _State | None = None
        self._lock = threading.Lock()

    @property
    def folder(self) -> Path:
        return self.root / INDEX_DIR

    # -- keeping current ----------------------------------------------------------------
    def refresh(self, *, sweep: bool | None = None) -> int:
        """Bring the summaries up to date; returns the generation (changes when any summary changed).

        ``sweep``: True compares every run's files now, False only follows the journal and new
        folders, None (default) sweeps when the last sweep is older than ``sweep_every``.
        """
        with self._lock:
            state = self._state
            if state is None:
                state = self._state = self._load()
                sweep = True
            changed = self._follow_journal(state)
            changed |= self._new_folders(state)
            if sweep or (sweep is None and time.monotonic() - state.swept >= self.sweep_every):
                changed |= self._sweep(state)
            if changed:
                state.generation += 1
                self._save(state)
            return state.generation

    def rebuild(self) -> int:
        """Forget the cache and read every run folder again."""
        with self._lock:
            self._state = _State(generation=(self._state.generation + 1) if self._state else 0)
            self._sweep(self._state)
            self._save(self._state)
        return self.refresh(sweep=False)

    def _load(self) -> _State:
        state = _State()
        path = self.folder / self._index_name
        data = _read(path) if _mine(path) else None
        if isinstance(data, dict) and data.get("version") == _VERSION and isinstance(data.get("entries"), dict):
            try:
                for rel, (folder, row, warning) in data["entries"].items():
                    if row is not None and len(row) != len(_ROW):
                        raise ValueError("a row of another version")
                    # no file signatures on disk: a run whose folder changed is simply read again
                    state.entries[str(rel)] = _Entry(int(folder), (), row, str(warning) if warning else None)
                state.runs_mtimes = {str(k): int(v) for k, v in (data.get("runs_mtimes") or {}).items()}
                state.generation = int(data.get("generation") or 0)
            except (KeyError, TypeError, ValueError):
                state = _State()  # corrupt: rebuilt by the sweep that follows
        state.journal_pos, state.journal_ino = self._journal_end()
        return state

    def _journal_end(self) -> tuple[int, int]:
        try:
            st = (self.folder / _JOURNAL).stat()
        except OSError:
            return 0, 0
        return st.st_size, st.st_ino

    def _save(self, state: _State) -> None:
        data = {
            "version": _VERSION,
            "generation": state.generation,
            "runs_mtimes": state.runs_mtimes,
            "entries": {rel: [e.folder, e.row, e.warning] for rel, e in state.entries.items()},
        }
        try:
            if not self.root.is_dir():
                return
            modes = folder_modes(self.root)
            make_dir(self.folder, modes)
            write_atomic(self.folder / self._index_name, json.dumps(data, separators=(",", ":")).encode(), 0o600)
            journal = self.folder / _JOURNAL
            if state.journal_pos > _JOURNAL_MAX and _mine(journal):  # start again; the next sweep covers a lost line
                journal.unlink(missing_ok=True)
                state.journal_pos, state.journal_ino = 0, 0
            if not journal.exists():
                fd = os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND | _NOFOLLOW, 0o600)
                # every member appends the runs it changed (a line only makes a reader look again)
                os.fchmod(fd, 0o600 if modes == PRIVATE else 0o660 if modes == GROUP else 0o644)
                os.close(fd)
            if not state.journal_ino:
                state.journal_pos, state.journal_ino = self._journal_end()
        except OSError:
            return  # a read-only experiments folder: the index lives in memory only

    def _follow_journal(self, state: _State) -> bool:
        journal = self.folder / _JOURNAL
        try:
            st = journal.stat()
        except OSError:
            return False
        if st.st_ino != state.journal_ino or st.st_size < state.journal_pos:
            state.journal_pos, state.journal_ino = 0, st.st_ino  # started again by another process
        if st.st_size == state.journal_pos:
            return False
        with open(journal, "rb") as f:
            f.seek(state.journal_pos)
            data = f.read(st.st_size - state.journal_pos)
        end = data.rfind(b"\n") + 1  # a line being written right now is read next time
        state.journal_pos += end
        changed = False
        for rel in dict.fromkeys(data[:end].decode(errors="replace").splitlines()):
            if rel and ".." not in Path(rel).parts:
                changed |= self._update(state, rel)
        return changed

    def _experiments(self, state: _State | None = None) -> list[os.DirEntry[str]]:
        try:
            found = [e for e in os.scandir(self.root) if not e.name.startswith(".")]
        except OSError:
            return []
        out = []
        for e in found:
            try:
                if e.is_dir(follow_symlinks=False):
                    out.append(e)
                elif state is not None and e.is_symlink():
                    state.exp_warnings[e.name] = "a symbolic link, not an experiment folder"
            except OSError:
                continue
        return out

    def _new_folders(self, state: _State) -> bool:
        """Experiments whose ``runs/`` changed (a run folder made or removed) are listed again."""
        changed = False
        seen = set()
        for exp in self._experiments(state):
            seen.add(exp.name)
            try:
                mtime = os.lstat(Path(exp.path, "runs")).st_mtime_ns
            except OSError:
                continue
            if state.runs_mtimes.get(exp.name) == mtime:
                continue
            state.runs_mtimes[exp.name] = mtime
            changed |= self._scan_experiment(state, exp.name, full=False)
        for gone in set(state.runs_mtimes) - seen:
            del state.runs_mtimes[gone]
            changed |= self._drop(state, _in_experiment(gone))
        return changed

    def _scan_experiment(self, state: _State, experiment: str, *, full: bool, present: set[str] | None = None) -> bool:
        """Read the runs of one experiment that are new (all of them, checked by mtime, with ``full``).

        Runs that left are dropped here, unless ``present`` collects the names for the caller to.
        """
        changed = False
        mine = present is None
        present = set() if present is None else present
        folder = self.root / experiment / "runs"
        runs: list[os.DirEntry[str]] = []
        try:
            st = os.lstat(folder)
            if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
                state.exp_warnings[experiment] = "its runs/ is not a folder"
            else:
                runs = list(os.scandir(folder))
                state.exp_warnings.pop(experiment, None)
        except FileNotFoundError:
            state.exp_warnings.pop(experiment, None)
        except OSError as e:
            owner = _uid(self.root / experiment)
            state.exp_warnings[experiment] = f"runs not readable ({e.strerror}; it belongs to uid {owner})"
        for run in runs:
            if run.name.startswith("."):
                continue
            rel = f"{experiment}/runs/{run.name}"
            present.add(rel)
            if full or rel not in state.entries:
                changed |= self._update(state, rel, check=full)
        if mine:
            prefix = f"{experiment}/runs/"
            changed |= self._drop(state, lambda rel: rel.startswith(prefix) and rel not in present)
        return changed

    def _drop(self, state: _State, which: Callable[[str], bool]) -> bool:
        gone = [rel for rel in state.entries if which(rel)]
        for rel in gone:
            del state.entries[rel]
        return bool(gone)

    def _sweep(self, state: _State) -> bool:
        changed = False
        names = set()
        present: set[str] = set()
        old_warnings = dict(state.exp_warnings)
        state.exp_warnings.clear()
        for exp in self._experiments(state):
            names.add(exp.name)
            with contextlib.suppress(OSError):
                state.runs_mtimes[exp.name] = os.lstat(Path(exp.path, "runs")).st_mtime_ns
            changed |= self._scan_experiment(state, exp.name, full=True, present=present)
        changed |= old_warnings != state.exp_warnings
        for gone in set(state.runs_mtimes) - names:
            del state.runs_mtimes[gone]
        changed |= self._drop(state, lambda rel: rel not in present)
        state.swept = time.monotonic()
        return changed

    def _update(self, state: _State, rel: str, *, check: bool = False) -> bool:
        """Re-read one run when its files changed; True when its summary did.

        With ``check`` (a sweep) an unchanged folder mtime is enough: every writer replaces
        a run's files by rename, which changes the folder's mtime.
        """
        run = f"{self._root}/{rel}"
        old = state.entries.get(rel)
        try:
            folder = os.lstat(run).st_mtime_ns
        except OSError:
            return self._drop(state, lambda r: r == rel)
        if check and old is not None and old.folder == folder:
            return False
        sig = _signature(run)
        if old is not None and old.sig == sig and old.sig:
            old.folder = folder
            return False
        summary, warning = inspect_run(Path(run), rel.split("/", 1)[0], self.check)
        row = _to_row(summary) if summary is not None else None
        state.entries[rel] = _Entry(folder, sig, row, warning)
        return old is None or old.row != row or old.warning != warning

    # -- reading ------------------------------------------------------------------------
    def _rows(self, sweep: bool | None) -> list[tuple[str, list[Any]]]:
        self.refresh(sweep=sweep)
        with self._lock:
            assert self._state is not None
            rows = [(rel, e.row) for rel, e in self._state.entries.items() if e.row is not None]
        rows.sort(key=lambda x: (x[1][_CREATED], x[1][_ID]), reverse=True)
        return rows

    def warnings(self, experiment: Sequence[str] = ()) -> tuple[str, ...]:
        """``folder: why`` for every run folder (or experiment) left out of the list, or partly ignored.

        A folder without a spec younger than a minute is being created and not named.
        """
        young = time.time_ns() - int(_INCOMPLETE_S * 1e9)
        names = set(experiment)
        with self._lock:
            if self._state is None:
                return ()
            state = self._state
            out = [f"{self._root}/{name}: {why}" for name, why in sorted(state.exp_warnings.items())
                   if not names or name in names]  # fmt: skip
            for rel, e in sorted(state.entries.items()):
                if not e.warning or (names and rel.split("/", 1)[0] not in names):
                    continue
                if e.warning == _NO_SPEC and e.folder > young:
                    continue
                out.append(f"{self._root}/{rel}: {e.warning}")
        return tuple(out)

    def backends_of(self, job_id: str | None = None, *, sweep: bool | None = False) -> list[str]:
        """The backends with a run folder of ``job_id`` (None: of any job), from the run records.

        What resolves a job id to its backend (and tells which backends this workspace used),
        whatever the settings say is configured now.
        """
        self.refresh(sweep=sweep)
        with self._lock:
            assert self._state is not None
            rows = [e.row for e in self._state.entries.values() if e.row is not None]
        found = (row[_BACKEND] for row in rows if job_id is None or row[_ID] == job_id)
        return sorted({str(b) for b in found})

    def summaries(self, *, sweep: bool | None = None) -> list[JobSummary]:
        """Every job summary, newest first."""
        return [_from_row(self.root, rel, row) for rel, row in self._rows(sweep)]

    def page(
        self,
        *,
        state: Sequence[str] = (),
        backend: Sequence[str] = (),
        experiment: Sequence[str] = (),
        since: float | None = None,
        offset: int = 0,
        limit: int | None = None,
        sweep: bool | None = None,
    ) -> JobPage:
        """The jobs matching every filter given (a filter with several values matches any), newest first.

        ``since``: jobs created, started or finished at or after this time (seconds since the epoch),
        and every unfinished job.
        """
        if offset < 0 or (limit is not None and limit < 1):
            raise BadInputError("offset must be >= 0 and limit >= 1", field="limit")
        rows = self._rows(sweep)
        if state:
            states = set(state)
            rows = [r for r in rows if r[1][_STATE] in states]
        if backend:
            backends = set(backend)
            rows = [r for r in rows if r[1][_BACKEND] in backends]
        if experiment:
            names = set(experiment)
            rows = [r for r in rows if r[0].split("/", 1)[0] in names]
        if since is not None:
            rows = [r for r in rows if r[1][_STATE] not in _FINISHED or _last_change(r[1]) >= since]
        chosen = rows[offset : offset + limit] if limit is not None else rows[offset:]
        items = tuple(_from_row(self.root, rel, row) for rel, row in chosen)
        warnings = self.warnings(experiment)
        return JobPage(items, len(rows), offset, limit, page_etag(items, len(rows), str(len(warnings))),
                       warnings=warnings)  # fmt: skip


_ROW = ("id", "backend", "name", "title", "state", "created", "started", "finished", "reason", "nodes",
        "procs_per_node", "template", "accelerator", "steps", "restarts", "cost", "mounts")  # fmt: skip


_ID, _BACKEND, _STATE, _CREATED, _STARTED, _FINISHED_AT = (_ROW.index(k) for k in
    ("id", "backend", "state", "created", "started", "finished"))  # fmt: skip


def _last_change(row: list[Any]) -> float:
    return max(row[_CREATED] or 0.0, row[_STARTED] or 0.0, row[_FINISHED_AT] or 0.0)


def _to_row(s: JobSummary) -> list[Any]:
    data = s.to_json()
    return [data[k] for k in _ROW]


def _from_row(root: Path, rel: str, row: list[Any]) -> JobSummary:
    data = dict(zip(_ROW, row, strict=True))
    return JobSummary.from_json({**data, "experiment": rel.split("/", 1)[0], "experiment_dir": f"{root}/{rel}"})


def _mine(path: Path) -> bool:
    """A cache file this uid wrote (another user's index is not believed)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_uid == (os.geteuid() if hasattr(os, "geteuid") else st.st_uid)


def _uid(path: Path) -> int | str:
    try:
        return os.lstat(path).st_uid
    except OSError:
        return "?"


def _in_experiment(name: str) -> Callable[[str], bool]:
    return lambda rel: rel.split("/", 1)[0] == name


def page_etag(items: Iterable[JobSummary], total: int, extra: str = "") -> str:
    """A strong validator of a page's content (changes whenever a row or the total changes)."""
    h = hashlib.sha1(usedforsecurity=False)
    h.update(f"{total}|{extra}".encode())
    for s in items:
        h.update(json.dumps(s.to_json(), sort_keys=True).encode())
    return f'"{h.hexdigest()[:20]}"'
