"""``JobHandle``: what ``launch``, ``attach`` and ``%%sv train`` return in a notebook.

A :class:`~jupyter_starverse.watch.JobWatch` that displays itself as the live monitor.
All reading of the job lives in the watch (core); this module only adds display.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jupyter_starverse.watch import JobWatch

if TYPE_CHECKING:
    from .monitor import JobMonitor

__all__ = ["JobHandle"]


class JobHandle(JobWatch):
    """A submitted job; displaying it shows the live monitor (ranks, progress, loss, logs, cost)."""

    @classmethod
    def of(cls, watch: JobWatch) -> JobHandle:
        """The handle of ``watch`` (shares its backend, meter and metrics follower)."""
        if isinstance(watch, cls):
            return watch
        handle = cls.__new__(cls)
        handle.__dict__.update(watch.__dict__)
        return handle

    def monitor(self, *, interval: float = 1.0, log_lines: int = 20, start: bool = True) -> JobMonitor:
        """A live monitor widget of this job."""
        from .monitor import JobMonitor

        return JobMonitor(self, interval=interval, log_lines=log_lines, start=start)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(str(self))

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.monitor())  # type: ignore[no-untyped-call]
