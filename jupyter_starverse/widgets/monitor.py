"""The live job monitor: ranks, progress and ETA, loss chart, throughput, logs, cost, cancel.

Plain ipywidgets (no custom front-end code), so it renders in JupyterLab, Notebook 7 and
VS Code. A daemon thread polls the job's source of truth (the backend and the experiment
folder) so the kernel stays free; a kernel restart loses nothing, ``attach(job_id)`` in the
new kernel shows a fresh monitor of the same job.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from html import escape
from typing import Any

import ipywidgets as widgets

from jupyter_starverse._format import format_count, format_metric, format_rate, format_step
from jupyter_starverse.jobmodel import Job, JobState, LogLine
from jupyter_starverse.runtime import reference_series
from jupyter_starverse.watch import JobProgress, JobWatch, format_duration

from ._chart import loss_svg

__all__ = ["JobMonitor"]

log = logging.getLogger(__name__)

_BAR_STYLE = {
    JobState.PENDING: "info",
    JobState.RUNNING: "info",
    JobState.SUCCEEDED: "success",
    JobState.FAILED: "danger",
    JobState.CANCELLED: "warning",
}
_COLOR = {
    JobState.PENDING: "#888",
    JobState.RUNNING: "#1f77b4",
    JobState.SUCCEEDED: "#2ca02c",
    JobState.FAILED: "#d62728",
    JobState.CANCELLED: "#ff7f0e",
}


def _badge(state: JobState) -> str:
    return (
        f'<span class="starverse-state" style="color:#fff;background:{_COLOR[state]};'
        f'padding:0 6px;border-radius:3px">{state.value}</span>'
    )


def _ranks_table(job: Job, progress: JobProgress) -> str:
    nodes = {n.index: n for n in job.nodes}
    rows = []
    for r in progress.ranks:
        node = nodes.get(r.node)
        bits = [f"pid {r.pid}" if r.pid else ""]
        if r.restarts:
            bits.append(f"restarts {r.restarts}")
        if r.error:
            bits.append(f'<span style="color:#d62728">{escape(r.error)}</span>')
        if node is not None and r.local_rank == 0 and node.reason:
            bits.append(f"node: {escape(node.reason)}")
        step = "-" if r.last_step is None else str(r.last_step + 1)
        rows.append(
            f"<tr><td>node{r.node}</td><td>rank {r.rank}</td><td>{_badge(r.state)}</td>"
            f"<td>{step}</td><td class='starverse-rank-stats'>{escape(r.stats_text())}</td>"
            f"<td>{' '.join(b for b in bits if b)}</td></tr>"
        )
    return (
        '<table class="starverse-ranks" '
        'style="font-size:12px;border-spacing:8px 2px;margin-left:8px;white-space:nowrap">'
        "<tr><th>node</th><th>rank</th><th>state</th><th>step</th><th>throughput, loss</th><th></th></tr>"
        + "".join(rows)
        + "</table>"
    )


def _chart(curve: str | None, progress: JobProgress) -> str:
    """The live metric, with a reproduction's reference curve at the same steps when it has one."""
    label = progress.metric or "loss"
    found = reference_series(curve, [s for s, _ in progress.points], total_steps=progress.total_steps)
    if found is None or found[0].metric != label:
        return loss_svg(progress.points, width=320, label=label)
    ref, points = found
    return loss_svg(progress.points, width=320, label=label, reference=points,
                    reference_label=f"reference: {ref.kind}, {ref.source}")  # fmt: skip


def _log_html(lines: Sequence[LogLine]) -> str:
    text = "\n".join(line.render() for line in lines) or "(no output yet)"
    return (
        '<pre class="starverse-log" style="max-height:14em;overflow:auto;font-size:11px;'
        f'margin:0;white-space:pre-wrap">{escape(text)}</pre>'
    )


class JobMonitor(widgets.VBox):  # type: ignore[misc]
    """Live view of one job; polls in a background thread until the job finishes.

    Parameters
    ----------
    handle
        The job to watch (``jupyter_starverse.attach(job_id)`` gives one).
    interval
        Seconds between polls.
    log_lines
        How many of the last log lines to show.
    start
        Start the polling thread right away (tests call :meth:`refresh` themselves).
    """

    def __init__(self, handle: JobWatch, *, interval: float = 1.0, log_lines: int = 20, start: bool = True) -> None:
        self.handle = handle
        self.interval = interval
        self.log_lines = log_lines
        self.errors: list[str] = []
        self.last_progress: JobProgress | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.title = widgets.HTML(value=f"<b>{escape(handle.id)}</b>")
        self.bar = widgets.FloatProgress(
            value=0.0, min=0.0, max=1.0, description="", bar_style="info", layout=widgets.Layout(width="40%")
        )
        self.stats = widgets.HTML(value="")
        self.chart = widgets.HTML(value=loss_svg([], width=320))
        self.ranks = widgets.HTML(value="")
        self.logs = widgets.HTML(value=_log_html([]))
        self.error = widgets.HTML(value="", layout=widgets.Layout(display="none"))
        self.cancel_button = widgets.Button(description="Cancel job", button_style="danger", icon="stop")
        self.cancel_button.on_click(self._on_cancel)
        super().__init__(
            children=[
                self.title,
                widgets.HBox([self.bar, self.stats]),
                widgets.HBox([self.chart, self.ranks]),
                self.logs,
                self.error,
                self.cancel_button,
            ]
        )
        self.add_class("starverse-monitor")
        if start:
            self.start()

    def __repr__(self) -> str:
        # the text/plain fallback of the widget output, shown where the widget cannot be
        # (a saved notebook reopened after a kernel restart, nbviewer, a terminal)
        return f"job {self.handle.id}: jupyter_starverse.attach({self.handle.id!r})"

    # -- polling -----------------------------------------------------------------------
    def refresh(self) -> JobProgress:
        """Poll once: read the job, its metrics and log tail, update every child widget."""
        with self._lock:
            job = self.handle.job
            progress = self.handle.progress(job=job)
            tail = self.handle.tail(self.log_lines, job=job)
            self._render(job, progress, tail)
            self.last_progress = progress
            return progress

    def _render(self, job: Job, progress: JobProgress, tail: Sequence[LogLine]) -> None:
        state = job.state
        spec = job.spec
        named = f" {escape(spec.title)}" if spec.title != spec.name else ""
        self.title.value = (
            f"<b>{escape(job.id)}</b>{named} {_badge(state)} &middot; {spec.nodes} node(s) x {spec.procs_per_node} "
            f"proc(s) &middot; {escape(spec.template)} on {escape(spec.accelerator)}"
            f'<div style="font-size:11px;color:#666;word-break:break-all">{escape(job.experiment_dir)}</div>'
            + (
                f'<div class="starverse-mounts" style="font-size:11px">mounts {escape(", ".join(spec.mounted))}</div>'
                if spec.mounts
                else ""
            )  # the exact versions the job reads (pinned at launch)
            + (f"<div><i>{escape(job.reason)}</i></div>" if job.reason else "")
        )
        fraction = progress.fraction
        if fraction is not None:
            self.bar.value = fraction
        elif state is JobState.SUCCEEDED:
            self.bar.value = 1.0
        self.bar.bar_style = _BAR_STYLE[state]
        self.stats.value = self._stats_html(progress)
        self.chart.value = _chart(spec.env.get("STARVERSE_REFERENCE_CURVE"), progress)
        self.ranks.value = _ranks_table(job, progress)
        self.logs.value = _log_html(tail)
        if state.finished:
            self.cancel_button.disabled = True
            self.cancel_button.description = "Finished"
            self.cancel_button.button_style = ""
            self.cancel_button.icon = "check"

    @staticmethod
    def _stats_html(p: JobProgress) -> str:
        bits = []
        if p.phase is not None:  # start-up: scheduling, rendezvous k/n ranks, loading
            bits.append(f'<i class="starverse-phase">{escape(p.phase)}</i>')
        if p.step is not None:
            bits.append(f"<b>{format_step(p.step + 1, p.total_steps)}</b>")
        if p.fraction is not None:
            bits.append(f"{p.fraction:.0%}")
        if p.eta_s is not None and not p.state.finished:
            bits.append(f"ETA {format_duration(p.eta_s)}")
        if p.steps_per_s is not None:
            bits.append(format_rate(p.steps_per_s))
        if p.tokens_per_s is not None:
            bits.append(f"{format_count(round(p.tokens_per_s))} tokens/s")
        if p.tflops is not None:
            bits.append(f"{format_metric(p.tflops)} TFLOPS/card")
        bits.append(f"elapsed {format_duration(p.elapsed_s)}")
        if p.cost_text is not None:
            bits.append(f"cost {escape(p.cost_text)}")
        return '<span class="starverse-stats">' + " &middot; ".join(bits) + "</span>"

    def start(self) -> None:
        """Start the polling thread (no-op when it runs)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._poll, name=f"starverse-monitor-{self.handle.id}", daemon=True)
        self._thread.start()

    def stop(self, *, timeout: float | None = 5.0) -> None:
        """Stop polling and wait for the thread to end."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    @property
    def polling(self) -> bool:
        """True while the background thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def _poll(self) -> None:
        delay = self.interval
        while not self._stop.is_set():
            try:
                progress = self.refresh()
            except Exception as exc:  # surfaced in the widget and the log, polling goes on
                self.report_error(exc)
                delay = min(delay * 2, 30.0)
            else:
                delay = self.interval
                if progress.state.finished:
                    return
            self._stop.wait(delay)

    # -- errors and actions ------------------------------------------------------------
    def report_error(self, exc: BaseException) -> None:
        """Show ``exc`` in the widget (and the kernel log, once per distinct message)."""
        text = f"{type(exc).__name__}: {exc}"
        if not self.errors or self.errors[-1] != text:
            log.error("starverse monitor of %s: %s", self.handle.id, text, exc_info=exc)
        self.errors.append(text)
        del self.errors[:-50]
        self.error.value = (
            f'<div class="starverse-error" style="color:#d62728">{time.strftime("%H:%M:%S")} {escape(text)}</div>'
        )
        self.error.layout.display = ""

    def _on_cancel(self, _button: Any) -> None:
        self.cancel_button.disabled = True
        self.cancel_button.description = "Cancelling..."
        threading.Thread(target=self._cancel, name=f"starverse-cancel-{self.handle.id}", daemon=True).start()

    def _cancel(self) -> None:
        try:
            self.handle.cancel()
            self.refresh()
        except Exception as exc:
            self.report_error(exc)
            self.cancel_button.disabled = False
            self.cancel_button.description = "Cancel job"

    def close(self) -> None:
        """Stop polling and close every child widget."""
        if "_stop" in self.__dict__:  # ipywidgets also calls close() on half-built widgets
            self.stop()
        for child in self.children:
            if isinstance(child, widgets.Box):
                for inner in child.children:
                    inner.close()
            child.close()
        super().close()
