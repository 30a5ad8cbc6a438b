"""``LogView``: a stream of log lines (or other text items) shown as one scrollable block.

What ``%sv jobs logs ID [-f]`` and ``%sv demo`` return in a notebook: the command yields its
lines one by one; in a kernel with a front end the view draws an HTML widget and appends
each line as it arrives (so ``-f`` follows live), elsewhere it shows the lines once they
are all there. Never a generator repr.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator
from html import escape
from typing import Any

from jupyter_starverse._format import log_lines_html, pretty_text
from jupyter_starverse.errors import StarverseError

__all__ = ["LogView"]

_RANK = re.compile(r"^\[(\d+)\]")
_MAX_KEPT = 5000  # lines kept for display; older ones scroll away


def _line_of(item: object) -> tuple[int | None, str]:
    """``(rank, text)`` of one item: a rendered log line, a ``{"rank", "text"}`` record, or anything."""
    if isinstance(item, dict) and "text" in item:
        rank = item.get("rank")
        prefix = f"[{rank}]" if rank is not None else f"[node{item.get('node', 0)}]"
        return (rank if isinstance(rank, int) else None), f"{prefix} {item['text']}"
    text = str(item)
    m = _RANK.match(text)
    return (int(m.group(1)) if m else None), text


class LogView:
    """Lines of ``items``, read once, shown as text or a scrollable, rank-coloured block."""

    def __init__(self, items: Iterable[object], *, title: str = "") -> None:
        self._items: Iterator[object] | None = iter(items)
        self.title = title
        self.lines: list[tuple[int | None, str]] = []
        self.error: str | None = None

    def _pull(self) -> Iterator[tuple[int | None, str]]:
        """Read the items not read yet (a following stream blocks until its job ends)."""
        items, self._items = self._items, None
        if items is None:
            return
        try:
            for item in items:
                line = _line_of(item)
                self.lines.append(line)
                if len(self.lines) > _MAX_KEPT:
                    del self.lines[: len(self.lines) - _MAX_KEPT]
                yield line
        except StarverseError as e:
            self.error = str(e)

    def read(self) -> list[str]:
        """Every line as text (reads the stream to its end)."""
        for _ in self._pull():
            pass
        return [text for _, text in self.lines]

    def text(self) -> str:
        lines = self.read()
        out = "\n".join(lines) if lines else "(no output)"
        return out + (f"\nerror: {self.error}" if self.error else "")

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        return f"<LogView {self.title or 'lines'}: {len(self.lines)} line(s)>"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, self.text())

    def _html(self) -> str:
        body = log_lines_html(self.lines)
        if self.error:
            body += f"<div style='color:#d62728'>error: {escape(self.error)}</div>"
        return body

    def _repr_html_(self) -> str:
        self.read()
        return self._html()

    def _ipython_display_(self) -> None:
        from IPython.display import display

        if not _has_frontend():
            self.read()
            display({"text/plain": self.text(), "text/html": self._html()}, raw=True)  # type: ignore[no-untyped-call]
            return
        # one display updated in place (not a widget): its text/plain is the log itself, readable
        # wherever the output is saved or shown as text, and no ipywidgets import is needed
        handle = display(self._bundle(), raw=True, display_id=True)  # type: ignore[no-untyped-call]
        shown = time.monotonic()
        for _ in self._pull():  # follow: redraw at most 5 times a second
            if time.monotonic() - shown > 0.2:
                handle.update(self._bundle(), raw=True)
                shown = time.monotonic()
        handle.update(self._bundle(), raw=True)

    def _bundle(self) -> dict[str, str]:
        lines = [text for _, text in self.lines]
        plain = ("\n".join(lines) if lines else "(no output yet)") + (f"\nerror: {self.error}" if self.error else "")
        return {"text/plain": plain, "text/html": self._html()}


def _has_frontend() -> bool:
    """True in a kernel a front end talks to (widgets can be drawn and updated)."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - the magics need IPython anyway
        return False
    shell = get_ipython()  # type: ignore[no-untyped-call]
    return shell is not None and getattr(shell, "kernel", None) is not None
