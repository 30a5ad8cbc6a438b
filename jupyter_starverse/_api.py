"""The Python front door: ``jupyter_starverse.launch / jobs / attach``.

Thin functions over :class:`~jupyter_starverse.client.Starverse`; the package's
``__init__`` exposes them lazily. They return a :class:`JobHandle` (the facade's
:class:`~jupyter_starverse.watch.JobWatch` with a display), so this module is a front
door like the magics: no core module imports it.
"""

from __future__ import annotations

import threading
from html import escape
from pathlib import Path
from typing import Any

from ._settings import Settings
from .client import Starverse
from .jobmodel import Job, JobSpec
from .widgets import JobHandle

__all__ = ["JobHandle", "JobList", "attach", "client", "jobs", "launch"]

_clients: dict[Settings, Starverse] = {}
_clients_lock = threading.Lock()


def client(settings: Settings | None = None) -> Starverse:
    """The facade for ``settings`` (the environment's when omitted), built once per settings."""
    settings = settings if settings is not None else Settings.from_env()
    with _clients_lock:
        if settings not in _clients:
            _clients[settings] = Starverse(settings)
        return _clients[settings]


def _default_name(script: str | None) -> str:
    # the script's own name, as the user wrote it: JobSpec keeps it for display and derives the id
    return (Path(script).stem.strip() if script else "") or "train"


def launch(
    spec: JobSpec | None = None,
    /,
    *,
    backend: str | None = None,
    settings: Settings | None = None,
    procs: int | None = None,
    **fields: Any,
) -> JobHandle:
    """Submit a training job and return its handle (displaying it shows the monitor).

    Parameters
    ----------
    spec
        A ready :class:`JobSpec`; or leave it out and give its fields as keywords
        (``script=`` or ``code=``, ``nodes=``, ``procs=``, ``steps=``, ``mounts=``, ...).
    backend
        ``local`` (default) or ``kubernetes``.
    settings
        Settings to use instead of the environment's.
    procs
        Processes (GPUs) per node; short for ``procs_per_node``.

    Examples
    --------
    >>> job = launch(script="train.py", nodes=2, procs=2, steps=100)  # doctest: +SKIP
    >>> job  # the live monitor  # doctest: +SKIP
    """
    if procs is not None:
        fields["procs_per_node"] = procs
    if spec is None:
        fields.setdefault("name", _default_name(fields.get("script")))
        spec = JobSpec.from_json(fields)  # unknown keywords: BadInputError naming the known ones
    elif fields:
        spec = spec.replace(**fields)
    facade = client(settings)
    job = facade.launch(spec, backend=backend)
    return JobHandle.of(facade.watch(job.id, backend=job.backend))


def attach(job_id: str, *, backend: str | None = None, settings: Settings | None = None) -> JobHandle:
    """Re-attach to a job by id, from any kernel, after any restart; raises NotFoundError if unknown."""
    facade = client(settings)
    job = facade.attach(job_id, backend=backend)
    return JobHandle.of(facade.watch(job.id, backend=job.backend))


class JobList(list[Job]):
    """Jobs, newest first; shows as a table in a notebook and as text in a terminal."""

    def to_json(self) -> list[dict[str, Any]]:
        return [job.to_json() for job in self]

    def _rows(self) -> list[tuple[str, ...]]:
        rows: list[tuple[str, ...]] = []
        for job in self:
            spec = job.spec
            rows.append(
                (job.id, job.state.value, f"{spec.nodes}x{spec.procs_per_node}", spec.accelerator, job.backend,
                 job.experiment_dir)
            )
        return rows

    def __str__(self) -> str:
        head = ("id", "state", "topology", "accelerator", "backend", "experiment")
        rows = [head, *self._rows()]
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{h}</th>" for h in ("id", "state", "topology", "accelerator", "backend", "experiment"))
        body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in self._rows())
        return f'<table class="starverse-jobs"><tr>{head}</tr>{body}</table>'


def jobs(*, backend: str | None = None, settings: Settings | None = None) -> JobList:
    """Every job the backend knows, newest first."""
    return JobList(client(settings).jobs(backend=backend))
