"""Catalog browser for notebooks (plain ipywidgets, so it works in VS Code too).

``CatalogBrowser(client)`` lists every entry with state and size; pick one to pull it
(with a progress bar showing bytes, rate and ETA) or mount it (shows the path). Pulls run
in a thread so the kernel stays responsive; errors are shown in the widget, never lost.
``progress_bar(ref)`` is the bar ``%sv store pull`` shows.
"""

from __future__ import annotations

import html
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ipywidgets as W

from jupyter_starverse._format import format_duration
from jupyter_starverse.catalog import EntryStatus, PullProgress, format_bytes
from jupyter_starverse.errors import StarverseError

if TYPE_CHECKING:
    from jupyter_starverse.client import Starverse

__all__ = ["CatalogBrowser", "PullBar", "progress_bar"]


class PullBar(W.HBox):  # type: ignore[misc]
    """A progress bar for one pull: percent, bytes, rate and ETA."""

    def __init__(self, ref: str = "") -> None:
        self.bar = W.FloatProgress(value=0.0, min=0.0, max=100.0, description="", layout=W.Layout(width="50%"))
        self.label = W.HTML(value=html.escape(ref))
        self.ref = ref
        self.text = ref
        super().__init__([self.bar, self.label])

    def __repr__(self) -> str:
        # what a front end without widgets shows (a terminal IPython)
        return f"pull {self.text or self.ref}"

    def update(self, p: PullProgress) -> None:
        self.bar.value = p.percent
        eta = format_duration(p.eta_s)
        who = "" if p.owner or p.phase == "done" else " (another process is pulling)"
        self.text = (
            f"{p.ref}: {p.phase}{who} {format_bytes(p.bytes_done)} / {format_bytes(p.bytes_total)}"
            f" · {format_bytes(p.rate)}/s · ETA {eta}"
        )
        self.label.value = html.escape(self.text)
        self.bar.bar_style = {"done": "success", "failed": "danger"}.get(p.phase, "info")


def progress_bar(ref: str) -> tuple[Callable[[PullProgress], None], Callable[[], None]]:
    """Display a :class:`PullBar` now and return ``(update, close)`` for ``Catalog.pull``."""
    from IPython.display import display

    bar = PullBar(ref)
    display(bar)  # type: ignore[no-untyped-call]
    return bar.update, lambda: None


class CatalogBrowser(W.VBox):  # type: ignore[misc]
    """Browse the store: state, size, pull with progress, mount.

    Parameters
    ----------
    client
        The facade (``Starverse()``); its catalog is read on every refresh.
    """

    def __init__(self, client: Starverse) -> None:
        self.client = client
        self.select = W.Select(options=[], rows=8, layout=W.Layout(width="100%"))
        self.detail = W.HTML()
        self.path = W.Text(description="path", disabled=True, layout=W.Layout(width="100%"))
        self.error = W.HTML()
        self.pull_button = W.Button(description="Pull", icon="download", tooltip="fill the store from the source once")
        self.mount_button = W.Button(description="Mount", icon="folder-open", tooltip="show the read-only path")
        self.refresh_button = W.Button(description="Refresh", icon="refresh")
        self.bar = PullBar()
        self._statuses: dict[str, EntryStatus] = {}
        self._thread: threading.Thread | None = None
        self.select.observe(self._on_select, names=["value"])
        self.pull_button.on_click(lambda _b: self.pull())
        self.mount_button.on_click(lambda _b: self.mount())
        self.refresh_button.on_click(lambda _b: self.refresh())
        buttons = W.HBox([self.pull_button, self.mount_button, self.refresh_button])
        super().__init__([self.select, self.detail, buttons, self.bar, self.path, self.error])
        self.refresh()

    # -- actions -------------------------------------------------------------------
    def refresh(self) -> None:
        """Reread the catalog from the store."""
        self._guard(self._refresh)

    def _refresh(self) -> None:
        statuses = self.client.catalog.ls()
        self._statuses = {s.ref: s for s in statuses}
        current = self.select.value
        self.select.options = [(self._label(s), s.ref) for s in statuses]
        if current in self._statuses:
            self.select.value = current
        elif statuses:
            self.select.value = statuses[0].ref
        self._show()

    @staticmethod
    def _label(s: EntryStatus) -> str:
        return f"{s.ref}  [{s.state}]  {format_bytes(s.size)}"

    def pull(self, *, wait: bool = False) -> None:
        """Pull the selected entry in a thread (``wait=True`` joins it, for scripts and tests)."""
        ref = self.select.value
        if not ref or (self._thread is not None and self._thread.is_alive()):
            return
        self.pull_button.disabled = True
        self.error.value = ""

        def work() -> None:
            try:
                self._guard(lambda: self.client.catalog.pull(ref, progress=self.bar.update))
            finally:
                self.pull_button.disabled = False
                self._guard(self._refresh)

        self._thread = threading.Thread(target=work, name=f"pull-{ref}", daemon=True)
        self._thread.start()
        if wait:
            self._thread.join()

    def mount(self) -> None:
        """Show the path of the selected entry (it must be pulled)."""
        ref = self.select.value
        if ref:
            self._guard(lambda: setattr(self.path, "value", str(self.client.catalog.mount(ref))))

    # -- display -------------------------------------------------------------------
    def _on_select(self, change: dict[str, Any]) -> None:
        self.path.value = ""
        self._show()

    def _show(self) -> None:
        s = self._statuses.get(self.select.value or "")
        if s is None:
            self.detail.value = "<i>The store is empty: add a dataset or pull a model.</i>"
            return
        rows = [
            ("state", s.state),
            ("size", f"{format_bytes(s.size)} in {s.files} files"),
            ("source", s.entry.source),
            ("license", s.entry.license or "-"),
            ("description", s.entry.description or "-"),
        ]
        cells = "".join(f"<tr><th style='text-align:left'>{k}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
        self.detail.value = f"<table>{cells}</table>"
        self.mount_button.disabled = s.state != "cached"

    def _guard(self, fn: Callable[[], object]) -> None:
        try:
            fn()
        except Exception as e:  # shown in the widget: a pull thread has nobody else to tell
            text = str(e) if isinstance(e, StarverseError) else f"{type(e).__name__}: {e}"
            self.error.value = f"<span style='color:var(--jp-error-color1,#c00)'>{html.escape(text)}</span>"
