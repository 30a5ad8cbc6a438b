"""The one formatting module: every number a person sees is written the same way."""

from __future__ import annotations

from decimal import Decimal

from jupyter_starverse._format import (
    format_bytes,
    format_count,
    format_duration,
    format_metric,
    format_money,
    format_price_per_hour,
    format_rate,
    format_step,
    highlight_html,
    log_lines_html,
)
from jupyter_starverse.watch import format_duration as watch_duration


def test_money_prices_and_rates() -> None:
    assert format_money(Decimal("230.4"), "CNY") == "230.40 CNY"
    assert format_money(Decimal("0.005"), "CNY") == "0.01 CNY"
    assert format_money(1234567.891, "USD") == "1,234,567.89 USD"
    assert format_money(None) == "-"
    assert format_price_per_hour(Decimal("7.2"), "CNY") == "7.20 CNY/h"
    assert format_price_per_hour(None, "CNY") == "unknown"
    assert format_rate(2.345) == "2.35 steps/s"
    assert format_rate(None) == "-"


def test_bytes_durations_counts_steps() -> None:
    assert format_bytes(1536) == "1.5 KiB"
    assert format_bytes(512) == "512 B"
    assert format_bytes(3 * 1024**3) == "3.0 GiB"
    assert format_duration(75) == "1m15s" == watch_duration(75)
    assert format_duration(3700) == "1h01m" == watch_duration(3700)
    assert format_duration(5) == "5s"
    assert format_count(1234567) == "1,234,567"
    assert format_step(40, 100) == "step 40/100"
    assert format_step(40) == "step 40"


def test_metrics_have_four_significant_digits_and_no_exponent_in_range() -> None:
    assert format_metric(0.123456) == "0.1235"
    assert format_metric(2.0) == "2"
    assert format_metric(0.00012346) == "0.0001235"
    assert "e" not in format_metric(3.2e-4)
    assert format_metric(123456.7) == "123457"
    assert format_metric(1.5e-6) == "1.500e-06"
    assert format_metric(2.5e7) == "2.500e+07"
    assert format_metric(0) == "0"


def test_html_helpers_escape_everything() -> None:
    html = highlight_html('name: "<x>"  # note\nsteps: 4\n')
    assert "<x>" not in html and "&lt;x&gt;" in html and "<span" in html
    logs = log_lines_html([(0, "[0] <b>hi</b>"), (None, "[node0] started")])
    assert "&lt;b&gt;" in logs and "overflow:auto" in logs


def test_a_dataclass_record_shown_as_text_prints_its_text_in_ipython_not_its_repr() -> None:
    from dataclasses import dataclass

    from IPython.lib.pretty import pretty

    from jupyter_starverse._format import ShownAsText

    @dataclass(frozen=True)
    class Saved(ShownAsText):
        names: tuple[str, ...]

        def __str__(self) -> str:
            return f"saved {len(self.names)} name(s): {', '.join(self.names)}\n  <and> more"

    record = Saved(("a", "b"))
    assert pretty(record) == "saved 2 name(s): a, b\n  <and> more"  # a dataclass repr would be Saved(names=...)
    assert record._repr_html_().endswith(">saved 2 name(s): a, b\n  &lt;and&gt; more</pre>")
    assert repr(record).endswith("Saved(names=('a', 'b'))")  # repr() stays the dataclass's
