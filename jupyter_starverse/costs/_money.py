"""Exact money and time arithmetic shared by estimates, meters and caps.

Rules, applied everywhere in :mod:`jupyter_starverse.costs`:

- Money is :class:`~decimal.Decimal`, never ``float``. Prices are read from JSON as
  decimals, so ``1.8`` stays ``1.8``.
- Time is billed per started second: a duration is rounded *up* to whole seconds
  (``0.2 s`` bills ``1 s``, ``14400.0 s`` bills ``14400 s``, ``14400.001 s`` bills ``14401 s``).
- A total is computed exactly (rate x units x seconds, divided by 3600 once) and rounded
  once, at the end, to the currency's minor unit with ``ROUND_HALF_UP``. Parts are never
  rounded and then summed.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from decimal import (
    MAX_EMAX,
    MIN_EMIN,
    ROUND_CEILING,
    ROUND_FLOOR,
    ROUND_HALF_UP,
    Context,
    Decimal,
    InvalidOperation,
    localcontext,
)

from jupyter_starverse._format import format_money
from jupyter_starverse.errors import BadInputError

__all__ = [
    "MAX_SECONDS",
    "SECONDS_PER_HOUR",
    "DurationLike",
    "billable_seconds",
    "fmt_money",
    "fmt_seconds",
    "money_for",
    "parse_duration",
    "parse_money",
    "round_money",
    "seconds_for",
]

SECONDS_PER_HOUR = 3600
#: Longest duration we price: one leap year. Anything longer is a typo (hours given as seconds...).
MAX_SECONDS = 366 * 24 * SECONDS_PER_HOUR

DurationLike = timedelta | Decimal | int | float | str

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PART_RE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_FULL_RE = re.compile(r"^\s*(?:\d+(?:\.\d+)?\s*[smhdw]\s*)+$")
# 28 digits (the default) would do; 40 leaves room for 4096 nodes x 64 cards x a year.
_CTX = Context(prec=40)
_WIDE = Context(prec=40, Emax=MAX_EMAX, Emin=MIN_EMIN)


def _seconds_decimal(value: DurationLike, *, field: str) -> Decimal:
    if isinstance(value, bool):
        raise BadInputError(f"{field}: {value!r} is not a duration", field=field)
    if isinstance(value, timedelta):
        # days/seconds/microseconds are ints: exact, unlike total_seconds().
        return Decimal(value.days * 86400 + value.seconds) + Decimal(value.microseconds).scaleb(-6)
    if isinstance(value, str):
        return parse_duration(value, field=field)
    if isinstance(value, (int, Decimal)):
        return Decimal(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise BadInputError(f"{field}: {value!r} is not a finite duration", field=field)
        return Decimal(repr(value))
    raise BadInputError(f"{field}: {value!r} is not a duration", field=field, hint="give seconds or a timedelta")


def parse_duration(text: str, *, field: str = "duration") -> Decimal:
    """Seconds in ``"90s"``, ``"15m"``, ``"4h"``, ``"2h30m"``, ``"3d"``, ``"1w"`` (exact decimal).

    A bare number is refused: ``"4"`` could be hours or seconds.
    """
    if not isinstance(text, str) or not _FULL_RE.match(text.lower()):
        raise BadInputError(
            f"{field}: {text!r} is not a duration",
            field=field,
            hint="write it with units, for example 90s, 15m, 4h, 2h30m, 3d or 1w",
        )
    total = Decimal(0)
    for number, unit in _PART_RE.findall(text.lower()):
        total += Decimal(number) * _UNITS[unit]
    return total


def billable_seconds(value: DurationLike, *, field: str = "duration", allow_zero: bool = False) -> int:
    """Whole seconds billed for ``value`` (rounded up); rejects negative, zero and absurd values.

    Parameters
    ----------
    value
        Seconds (``int``, ``Decimal``, ``float``), a :class:`~datetime.timedelta`, or text
        such as ``"4h"`` (see :func:`parse_duration`).
    field
        Name used in the error message.
    allow_zero
        Accept a zero duration (a node that has not run yet costs nothing).
    """
    seconds = _seconds_decimal(value, field=field)
    if not seconds.is_finite():
        raise BadInputError(f"{field}: {value!r} is not a finite duration", field=field)
    if seconds < 0 or (seconds == 0 and not allow_zero):
        raise BadInputError(
            f"{field}: must be {'zero or more' if allow_zero else 'positive'}, got {seconds.normalize():f} s",
            field=field,
            hint="give how long the job runs, for example 4 hours",
        )
    if seconds > MAX_SECONDS:
        raise BadInputError(
            f"{field}: {seconds} s is more than a year",
            field=field,
            hint="check the unit: durations are seconds unless written like 4h or 3d",
        )
    return int(seconds.to_integral_value(rounding=ROUND_CEILING))


def parse_money(value: object, *, field: str, allow_zero: bool = True) -> Decimal:
    """A finite, non-negative amount; floats go through ``repr`` so ``1.8`` stays ``1.8``."""
    if isinstance(value, bool) or value is None:
        raise BadInputError(f"{field}: {value!r} is not an amount", field=field)
    try:
        out = Decimal(repr(value)) if isinstance(value, float) else Decimal(str(value).strip())
    except InvalidOperation:
        raise BadInputError(
            f"{field}: {value!r} is not an amount", field=field, hint="write a number such as 1.8"
        ) from None
    if not out.is_finite() or out < 0 or (out == 0 and not allow_zero):
        raise BadInputError(
            f"{field}: must be a {'non-negative' if allow_zero else 'positive'} amount, got {value!r}", field=field
        )
    return out


def round_money(amount: Decimal, decimals: int) -> Decimal:
    """Round to the currency's minor unit (``ROUND_HALF_UP``): 230.416 -> 230.42 with 2 decimals."""
    return amount.quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP)


def money_for(rate_per_hour: Decimal, unit_seconds: int, decimals: int) -> Decimal:
    """``rate_per_hour x unit_seconds / 3600``, computed exactly and rounded once."""
    with localcontext(_CTX):
        exact = rate_per_hour * unit_seconds / SECONDS_PER_HOUR
        return round_money(exact, decimals)


def seconds_for(amount: Decimal, per_hour: Decimal) -> int | None:
    """Whole seconds ``amount`` pays for at ``per_hour`` (floored); ``None`` beyond a year or at no cost."""
    if per_hour <= 0:
        return None
    with localcontext(_WIDE):  # a budget of 1e999999 must not overflow
        seconds = amount * SECONDS_PER_HOUR / per_hour
        if seconds > MAX_SECONDS:
            return None
        return max(0, int(seconds.to_integral_value(rounding=ROUND_FLOOR)))


def fmt_money(amount: Decimal, currency: str) -> str:
    """``230.40 CNY``: two decimals, thousands separated (:func:`jupyter_starverse._format.format_money`)."""
    return format_money(amount, currency)


def fmt_seconds(seconds: int) -> str:
    """Short human duration: ``4h``, ``2h30m``, ``3d``, ``45s``."""
    if seconds == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        n, seconds = divmod(seconds, size)
        if n:
            parts.append(f"{n}{unit}")
    return "".join(parts)
