"""How every number and every small piece of HTML a person sees is written (base floor).

One place for money, prices per hour, rates, bytes, durations, counts, metrics and steps,
so the CLI, the magics' HTML and the widgets write ``1m15s`` and ``1.5 GiB`` the same way.
It imports nothing of the project (the base floor), so every package may use it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from html import escape
from typing import Any

__all__ = [
    "ShownAsText",
    "format_bytes",
    "format_count",
    "format_duration",
    "format_elapsed",
    "format_metric",
    "format_money",
    "format_price_per_hour",
    "format_rate",
    "format_step",
    "highlight_html",
    "html_pre",
    "html_table",
    "log_lines_html",
    "pretty_text",
    "state_badge",
]

_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def format_money(amount: Decimal | float | int | str | None, currency: str = "") -> str:
    """``Decimal('230.4'), 'CNY'`` -> ``'230.40 CNY'`` (two decimals, half up); ``None`` -> ``'-'``."""
    if amount is None:
        return "-"
    try:
        value = Decimal(str(amount)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    except InvalidOperation:
        return str(amount)
    text = f"{value:,.2f}"
    return f"{text} {currency}".rstrip()


def format_price_per_hour(amount: Decimal | float | int | str | None, currency: str = "") -> str:
    """``7.2, 'CNY'`` -> ``'7.20 CNY/h'``; ``None`` -> ``'unknown'``."""
    if amount is None:
        return "unknown"
    return f"{format_money(amount, currency)}/h"


def format_rate(value: float | None, unit: str = "steps") -> str:
    """``2.345, 'steps'`` -> ``'2.35 steps/s'`` (below 0.1: 4 significant digits)."""
    if value is None or not math.isfinite(value):
        return "-"
    text = f"{value:.2f}" if abs(value) >= 0.1 else format_metric(value)
    return f"{text} {unit}/s"


def format_bytes(n: float | None) -> str:
    """``1536`` -> ``'1.5 KiB'`` (binary units, one decimal; bytes as a whole number)."""
    if n is None:
        return "-"
    value = float(n)
    for unit in _BYTE_UNITS:
        if abs(value) < 1024 or unit == _BYTE_UNITS[-1]:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} {_BYTE_UNITS[-1]}"  # pragma: no cover


def format_duration(seconds: float | None) -> str:
    """``75`` -> ``'1m15s'``; ``3700`` -> ``'1h01m'``; ``None`` -> ``'-'``."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def format_elapsed(seconds: float) -> str:
    """A step's duration: ``0.42 s`` below one second (:func:`format_duration` would say ``0s``), else as it does."""
    return f"{seconds:.2f} s" if 0 < seconds < 1 else format_duration(seconds)


def format_count(n: int | None) -> str:
    """``1234567`` -> ``'1,234,567'``."""
    return "-" if n is None else f"{n:,}"


def format_metric(value: float | None) -> str:
    """4 significant digits; plain notation in ``[1e-4, 1e6)``, scientific outside (``1.235e-05``)."""
    if value is None:
        return "-"
    v = float(value)
    if not math.isfinite(v):
        return str(v)
    if v == 0:
        return "0"
    if 1e-4 <= abs(v) < 1e6:
        digits = max(0, 3 - math.floor(math.log10(abs(v))))
        text = f"{v:.{digits}f}"
        if "." in text:
            text = text.rstrip("0").rstrip(".")
        return text
    return f"{v:.3e}"


def format_step(step: int | None, total: int | None = None) -> str:
    """``40, 100`` -> ``'step 40/100'``; ``40`` -> ``'step 40'``."""
    if step is None:
        return "step -"
    return f"step {step}/{total}" if total else f"step {step}"


# -- text and HTML for notebooks ------------------------------------------------------------

_STATE_COLOURS = {
    "pending": "#888",
    "running": "#1f77b4",
    "succeeded": "#2ca02c",
    "failed": "#d62728",
    "cancelled": "#ff7f0e",
    "cached": "#2ca02c",
    "partial": "#ff7f0e",
    "missing": "#888",
    "corrupt": "#d62728",
}
_RANK_COLOURS = ("#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#ff7f0e")


def pretty_text(p: object, text: str) -> None:
    """Write ``text`` into an IPython pretty printer ``p`` line by line (keeps its indentation)."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if i:
            p.break_()  # type: ignore[attr-defined]
        p.text(line)  # type: ignore[attr-defined]


class ShownAsText:
    """A mixin for records whose ``__str__`` is what a person reads.

    IPython shows such a record as its text, line by line, and notebooks as the same text in
    an escaped ``<pre>`` block. A record with a richer view overrides ``_repr_html_``.
    """

    __slots__ = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # IPython's pretty printer walks the MRO and takes the first class that defines either
        # ``_repr_pretty_`` or ``__repr__``: a dataclass subclass defines ``__repr__`` itself, so an
        # inherited ``_repr_pretty_`` would never be reached. Each subclass gets its own entry.
        super().__init_subclass__(**kwargs)
        if "_repr_pretty_" not in cls.__dict__:
            cls._repr_pretty_ = ShownAsText._repr_pretty_  # type: ignore[method-assign]

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))

    def _repr_html_(self) -> str:
        return html_pre(str(self))


def state_badge(state: str) -> str:
    """A coloured badge for a job, node or cache state."""
    colour = _STATE_COLOURS.get(state, "#555")
    return (
        f'<span class="starverse-state" style="color:#fff;background:{colour};'
        f'padding:0 6px;border-radius:3px">{escape(state)}</span>'
    )


def html_table(
    header: Sequence[str], rows: Iterable[Sequence[str]], *, raw_columns: Sequence[int] = (), caption: str = ""
) -> str:
    """A small table; cells are escaped except those in ``raw_columns`` (already HTML, e.g. badges)."""
    head = "".join(f"<th style='text-align:left'>{escape(h)}</th>" for h in header)
    body = []
    for row in rows:
        cells = "".join(
            f"<td style='text-align:left'>{c if i in raw_columns else escape(c)}</td>" for i, c in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    cap = f"<caption style='caption-side:bottom;text-align:left'>{escape(caption)}</caption>" if caption else ""
    return f"<table class='starverse'>{cap}<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def html_pre(text: str, *, max_height: str | None = None) -> str:
    """Escaped preformatted text (scrollable when ``max_height`` is given)."""
    style = f"max-height:{max_height};overflow:auto;" if max_height else ""
    return f"<pre class='starverse' style='{style}white-space:pre-wrap'>{escape(text)}</pre>"


_TOKEN = re.compile(
    r"(?P<comment>#[^\n]*)"
    r"|(?P<key>^[ \t-]*[\"']?[A-Za-z_][\w.\-/]*[\"']?(?=\s*:(\s|$)))"
    r"|(?P<string>\"(?:[^\"\\\n]|\\.)*\"|'[^'\n]*')"
    r"|(?P<number>(?<![\w.-])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.-]))"
    r"|(?P<literal>(?<![\w-])(?:true|false|null|True|False|None)(?![\w-]))",
    re.MULTILINE,
)
_TOKEN_COLOURS = {
    "comment": "#6a737d",
    "key": "#005cc5",
    "string": "#032f62",
    "number": "#e36209",
    "literal": "#d73a49",
}


def highlight_html(text: str) -> str:
    """YAML or JSON ``text`` as escaped HTML with keys, strings, numbers and comments coloured."""
    out: list[str] = []
    pos = 0
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup or ""
        out.append(escape(text[pos : m.start()]))
        out.append(f'<span style="color:{_TOKEN_COLOURS[kind]}">{escape(m.group())}</span>')
        pos = m.end()
    out.append(escape(text[pos:]))
    return f"<pre class='starverse-source' style='max-height:32em;overflow:auto'>{''.join(out)}</pre>"


def log_lines_html(lines: Iterable[tuple[int | None, str]], *, max_height: str = "24em") -> str:
    """Log lines ``(rank, text)`` in a scrollable block, each rank's prefix in its own colour."""
    rows = []
    for rank, text in lines:
        if rank is None:
            rows.append(f'<span style="color:#888">{escape(text)}</span>')
            continue
        colour = _RANK_COLOURS[rank % len(_RANK_COLOURS)]
        prefix, sep, rest = text.partition(" ")
        if prefix.startswith("["):
            rows.append(f'<span style="color:{colour};font-weight:bold">{escape(prefix)}</span>{sep}{escape(rest)}')
        else:
            rows.append(escape(text))
    body = "\n".join(rows) or "(no output)"
    return (
        f"<pre class='starverse-logs' style='max-height:{max_height};overflow:auto;white-space:pre-wrap'>{body}</pre>"
    )
