"""What every backend whose ranks write into a run folder shares: checks, mounts, logs, tails, waiting.

The local and Slurm backends both keep a job's per-rank logs in its experiment run folder
(shared storage), so reading them is the same code; only how a job id maps to its folder
differs (:meth:`RunFolderBackend.run_of`).
"""

from __future__ import annotations

import builtins
import time
from abc import abstractmethod
from collections.abc import Iterator
from pathlib import Path

from jupyter_starverse._inputs import check_path
from jupyter_starverse._settings import Settings
from jupyter_starverse.errors import BadInputError, ConflictError, NotFoundError
from jupyter_starverse.experiments import RunPaths
from jupyter_starverse.jobmodel import Job, JobSpec, LaunchBackend, LogLine
from jupyter_starverse.watch import follow_logs, read_rank_records, tail_run_logs

__all__ = ["RunFolderBackend"]


class RunFolderBackend(LaunchBackend):
    """A backend whose jobs' logs live in their run folder."""

    settings: Settings
    #: Seconds between two looks at a job in :meth:`wait`.
    poll: float = 0.2

    def check_script(self, spec: JobSpec) -> None:
        """The script exists and compiles (a command is the user's to check); nothing starts otherwise."""
        if spec.command:
            return
        if spec.code is not None:
            source, where = spec.code, "the training code"
        else:
            if spec.script:  # a name too long for the file system is bad input, not an OSError from stat
                check_path(spec.script, "script", hint="give the path of a Python file")
            path = Path(spec.script or "").expanduser()
            if not path.is_file():
                raise BadInputError(
                    f"script {str(path)!r} does not exist", field="script", hint="give the path of a Python file"
                )
            source, where = path.read_text(errors="replace"), str(path)
        try:
            compile(source, where, "exec")
        except SyntaxError as e:
            raise BadInputError(
                f"{where} has a syntax error on line {e.lineno}: {e.msg}",
                field="script",
                hint="fix it; nothing was started",
            ) from None

    def mounts(self, spec: JobSpec) -> tuple[dict[str, str], dict[str, str]]:
        """The store path of every mounted entry (same path on every node), and the store's job env."""
        from jupyter_starverse.catalog import Catalog

        catalog = Catalog(self.settings)
        paths: dict[str, str] = {}
        for name in spec.mounts:
            try:  # the version pinned at launch (client.pin_mounts), else what the name means now
                paths[name] = str(catalog.mount(spec.mount_versions.get(name, name)))
            except (NotFoundError, ConflictError, BadInputError) as e:
                raise BadInputError(f"mount {name!r}: {e.message}", field="mounts", hint=e.hint) from e
        return paths, catalog.job_env()

    @abstractmethod
    def run_of(self, job_id: str) -> RunPaths:
        """The run folder of ``job_id``; ``NotFoundError`` for an unknown id."""

    def logs(self, job_id: str, *, follow: bool = False, rank: int | None = None) -> Iterator[LogLine]:
        run = self.run_of(job_id)
        job = self.get(job_id)
        return follow_logs(
            run,
            world_size=job.spec.world_size,
            nodes=job.spec.nodes,
            rank=rank,
            follow=follow,
            finished=lambda: self.get(job_id).state.finished,
        )

    def tail(
        self, job_id: str, *, lines: int = 20, rank: int | None = None, job: Job | None = None
    ) -> builtins.list[LogLine]:
        """The last lines, read from the ends of the run's log files (a 200 MB log costs the same as 2 KB)."""
        job = job if job is not None else self.get(job_id)
        fast = tail_run_logs(job, read_rank_records(job), lines=lines, rank=rank)
        return fast if fast is not None else super().tail(job_id, lines=lines, rank=rank, job=job)

    def wait(self, job_id: str, *, timeout: float | None = None) -> Job:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.get(job_id)
            if job.state.finished or (deadline is not None and time.monotonic() >= deadline):
                return job
            time.sleep(self.poll)
