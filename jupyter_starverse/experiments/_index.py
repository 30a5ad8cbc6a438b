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
import json
import os
import stat
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_starverse._volume import GROUP, PRIVATE, make_dir, write_atomic
from jupyter_starverse.errors import BadInputError

from ._journal import _JOURNAL, INDEX_DIR, note_change
from ._modes import folder_modes
from ._summary import (
    FINISHED,
    INCOMPLETE_S,
    NO_SPEC,
    NOFOLLOW,
    ROW,
    JobPage,
    JobSummary,
    SpecCheck,
    from_row,
    inspect_run,
    last_change,
    page_etag,
    read_json,
    run_signature,
    skipped_text,
    summarize_run,
    to_row,
)

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

_ID, _BACKEND, _STATE, _CREATED = (ROW.index(k) for k in ("id", "backend", "state", "created"))
_VERSION = 5  # 5: the rows carry the mounted versions
_JOURNAL_MAX = 1 << 20  # bytes; beyond this the journal starts again (a sweep covers the gap)


@dataclass
class _Entry:
    folder: int  # mtime_ns of the run folder: unchanged while no file in it was created, renamed or removed
    sig: tuple[tuple[str, int, int], ...]  # (file, size, mtime_ns) of each watched file present
    row: list[Any] | None  # the summary as a compact row (see ROW); None: a folder that is not (yet) a job
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
        data = read_json(path) if _mine(path) else None
        if isinstance(data, dict) and data.get("version") == _VERSION and isinstance(data.get("entries"), dict):
            try:
                for rel, (folder, row, warning) in data["entries"].items():
                    if row is not None and len(row) != len(ROW):
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
                fd = os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND | NOFOLLOW, 0o600)
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
        sig = run_signature(run)
        if old is not None and old.sig == sig and old.sig:
            old.folder = folder
            return False
        summary, warning = inspect_run(Path(run), rel.split("/", 1)[0], self.check)
        row = to_row(summary) if summary is not None else None
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
        young = time.time_ns() - int(INCOMPLETE_S * 1e9)
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
                if e.warning == NO_SPEC and e.folder > young:
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
        return [from_row(self.root, rel, row) for rel, row in self._rows(sweep)]

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
            rows = [r for r in rows if r[1][_STATE] not in FINISHED or last_change(r[1]) >= since]
        chosen = rows[offset : offset + limit] if limit is not None else rows[offset:]
        items = tuple(from_row(self.root, rel, row) for rel, row in chosen)
        warnings = self.warnings(experiment)
        return JobPage(items, len(rows), offset, limit, page_etag(items, len(rows), str(len(warnings))),
                       warnings=warnings)  # fmt: skip


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
