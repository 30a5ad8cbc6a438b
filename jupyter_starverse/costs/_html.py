"""Small HTML renderings for notebooks (``_repr_html_``); every value is escaped."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

__all__ = ["line_html", "table_html"]


def table_html(
    header: Sequence[str], rows: Sequence[Sequence[str]], *, mark: int | None = None, caption: str = ""
) -> str:
    """A plain table; row ``mark`` is bold (the cheapest choice)."""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = []
    for i, row in enumerate(rows):
        cells = "".join(f"<td>{escape(c)}</td>" for c in row)
        style = ' style="font-weight:bold"' if i == mark else ""
        body.append(f"<tr{style}>{cells}</tr>")
    cap = f"<caption style='caption-side:bottom'>{escape(caption)}</caption>" if caption else ""
    return f"<table class='starverse-cost'>{cap}<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def line_html(strong: str, rest: str = "", note: str = "") -> str:
    """``<b>strong</b> rest`` with an optional note below."""
    out = f"<div class='starverse-cost'><b>{escape(strong)}</b> {escape(rest)}"
    if note:
        out += f"<br><small>{escape(note)}</small>"
    return out + "</div>"
