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
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_starverse.errors import BadInputError

__all__ = ["INDEX_DIR", "JobIndex", "JobPage", "JobSummary", "note_change", "page_etag", "summarize_run"]

INDEX_DIR = ".jobindex"
_VERSION = 3
_JOURNAL = "changes.log"
_INDEX = "index.json"
#: Files of a run folder a summary is made of; writing one of them is a change.
WATCHED = ("spec.json", "status.json", "kubernetes.json", "slurm.json")
_RECORDS = {"kubernetes.json": "kubernetes", "slurm.json": "slurm"}
_FINISHED = ("succeeded", "failed", "cancelled")
_JOURNAL_MAX = 1 << 20  # bytes; beyond this the journal starts again (a sweep covers the gap)


def note_change(path: Path) -> None:
    """Record that ``path`` (a watched file of a run folder) was rewritten; never fails the writer."""
    if path.name not in WATCHED or path.parent.parent.name != "runs":
        return
    root = path.parent.parent.parent.parent  # <experiments>/<experiment>/runs/<id>/<file>
    journal = root / INDEX_DIR / _JOURNAL
    with contextlib.suppress(OSError):
        if not journal.parent.is_dir():
            return  # no index yet: whoever builds it reads every folder anyway
        fd = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            os.write(fd, (str(path.parent.relative_to(root)) + "\n").encode())
        finally:
            os.close(fd)


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
        )


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

    def to_json(self) -> dict[str, Any]:
        return {
            "items": [s.to_json() for s in self.items],
            "total": self.total,
            "offset": self.offset,
            "limit": self.limit,
            "etag": self.etag,
            "notes": list(self.notes),
        }


@dataclass
class _Entry:
    folder: int  # mtime_ns of the run folder: unchanged while no file in it was created, renamed or removed
    sig: tuple[tuple[str, int, int], ...]  # (file, size, mtime_ns) of each watched file present
    row: list[Any] | None  # the summary as a compact row (see _ROW); None: a folder that is not (yet) a job


@dataclass
class _State:
    entries: dict[str, _Entry] = field(default_factory=dict)  # run folder relative to the root
    runs_mtimes: dict[str, int] = field(default_factory=dict)  # experiment -> mtime_ns of its runs/
    journal_pos: int = 0
    journal_ino: int = 0
    swept: float = 0.0  # time.monotonic() of the last full sweep
    generation: int = 0  # bumped whenever a summary changed, appeared or went away
    loaded_mtime: int = 0  # mtime_ns of index.json when we last read or wrote it


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _signature(run: str) -> tuple[tuple[str, int, int], ...]:
    out = []
    base = str(run)
    for name in WATCHED:
        try:
            st = os.stat(f"{base}/{name}")  # noqa: PTH116 - the sweep's hot loop: no Path objects
        except OSError:
            continue
        out.append((name, st.st_size, st.st_mtime_ns))
    return tuple(out)


def summarize_run(run: Path, experiment: str) -> JobSummary | None:
    """The summary of one run folder from its files; ``None`` when it is not a job (yet)."""
    record_name = next((n for n in _RECORDS if (run / n).is_file()), None)
    record = _read(run / record_name) if record_name else None
    record = record if isinstance(record, dict) else {}
    spec = _read(run / "spec.json")
    if not isinstance(spec, dict):
        spec = record.get("spec")
    if not isinstance(spec, dict) or not spec.get("name"):
        return None
    status = _read(run / "status.json")
    status = status if isinstance(status, dict) else {}
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
    except (TypeError, ValueError):
        return None
    return JobSummary(
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
    )


class JobIndex:
    """Cached summaries of every run folder under ``root``, kept current (see the module doc).

    One object may serve many threads (the server keeps one per experiments root).

    Parameters
    ----------
    root
        The experiments root (``STARVERSE_EXPERIMENTS``).
    sweep_every
        Seconds between two full mtime sweeps of a long-lived index (a new one sweeps first).
    """

    def __init__(self, root: Path, *, sweep_every: float = 30.0) -> None:
        self.root = Path(root)
        self._root = str(self.root)
        self.sweep_every = sweep_every
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
        data = _read(self.folder / _INDEX)
        if isinstance(data, dict) and data.get("version") == _VERSION and isinstance(data.get("entries"), dict):
            try:
                for rel, (folder, row) in data["entries"].items():
                    if row is not None and len(row) != len(_ROW):
                        raise ValueError("a row of another version")
                    # no file signatures on disk: a run whose folder changed is simply read again
                    state.entries[str(rel)] = _Entry(int(folder), (), row)
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
            "entries": {rel: [e.folder, e.row] for rel, e in state.entries.items()},
        }
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp = self.folder / f".{_INDEX}.{os.getpid()}.{threading.get_ident()}.tmp"
            tmp.write_text(json.dumps(data, separators=(",", ":")))
            tmp.replace(self.folder / _INDEX)
            journal = self.folder / _JOURNAL
            if state.journal_pos > _JOURNAL_MAX:  # start the journal again; the next sweep covers a lost line
                journal.unlink(missing_ok=True)
                state.journal_pos, state.journal_ino = 0, 0
            journal.touch(exist_ok=True)
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

    def _experiments(self) -> list[os.DirEntry[str]]:
        try:
            return [e for e in os.scandir(self.root) if not e.name.startswith(".") and e.is_dir()]
        except OSError:
            return []

    def _new_folders(self, state: _State) -> bool:
        """Experiments whose ``runs/`` changed (a run folder made or removed) are listed again."""
        changed = False
        seen = set()
        for exp in self._experiments():
            seen.add(exp.name)
            try:
                mtime = Path(exp.path, "runs").stat().st_mtime_ns
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
        try:
            runs = list(os.scandir(self.root / experiment / "runs"))
        except OSError:
            runs = []
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
        for exp in self._experiments():
            names.add(exp.name)
            with contextlib.suppress(OSError):
                state.runs_mtimes[exp.name] = Path(exp.path, "runs").stat().st_mtime_ns
            changed |= self._scan_experiment(state, exp.name, full=True, present=present)
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
            folder = os.stat(run).st_mtime_ns  # noqa: PTH116 - the sweep's hot loop: no Path objects
        except OSError:
            return self._drop(state, lambda r: r == rel)
        if check and old is not None and old.folder == folder:
            return False
        sig = _signature(run)
        if old is not None and old.sig == sig:
            old.folder = folder
            return False
        summary = summarize_run(Path(run), rel.split("/", 1)[0])
        row = _to_row(summary) if summary is not None else None
        state.entries[rel] = _Entry(folder, sig, row)
        return old is None or old.row != row

    # -- reading ------------------------------------------------------------------------
    def _rows(self, sweep: bool | None) -> list[tuple[str, list[Any]]]:
        self.refresh(sweep=sweep)
        with self._lock:
            assert self._state is not None
            rows = [(rel, e.row) for rel, e in self._state.entries.items() if e.row is not None]
        rows.sort(key=lambda x: (x[1][_CREATED], x[1][_ID]), reverse=True)
        return rows

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
        return JobPage(items, len(rows), offset, limit, page_etag(items, len(rows)))


_ROW = ("id", "backend", "name", "title", "state", "created", "started", "finished", "reason", "nodes",
        "procs_per_node", "template", "accelerator", "steps", "restarts", "cost")  # fmt: skip


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


def _in_experiment(name: str) -> Callable[[str], bool]:
    return lambda rel: rel.split("/", 1)[0] == name


def page_etag(items: Iterable[JobSummary], total: int, extra: str = "") -> str:
    """A strong validator of a page's content (changes whenever a row or the total changes)."""
    h = hashlib.sha1(usedforsecurity=False)
    h.update(f"{total}|{extra}".encode())
    for s in items:
        h.update(json.dumps(s.to_json(), sort_keys=True).encode())
    return f'"{h.hexdigest()[:20]}"'
