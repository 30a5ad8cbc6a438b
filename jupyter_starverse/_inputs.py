"""Checks of values that come from outside (REST bodies, CLI arguments, documents) before they are used.

Base floor: the standard library and ``errors`` only. Every check raises :class:`BadInputError`
with the field and a hint, so a front door answers 400 (or exit 2), never a crash further in:

- :func:`check_text`: a string that encodes as UTF-8 (no lone surrogate such as ``\\ud800``,
  which ``json.loads`` lets through and every ``encode()`` later refuses) and is not too long;
- :func:`check_path`: a name or path the file system can take (``NAME_MAX`` bytes per component,
  ``PATH_MAX`` in all, no NUL), checked before ``open``/``stat`` answer ENAMETOOLONG;
- :func:`check_number`: a finite number within bounds (no ``1e308`` hours, no ``0`` degrees);
- :func:`find_surrogate`: the first string (key or value) of a JSON document that is not UTF-8.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from decimal import Decimal, InvalidOperation
from typing import Any

from .errors import BadInputError

__all__ = [
    "MAX_TEXT",
    "NAME_MAX",
    "PATH_MAX",
    "check_number",
    "check_path",
    "check_text",
    "encodable",
    "find_surrogate",
    "shorten",
]

#: Longest file name component (bytes), and longest path, that Linux file systems take.
NAME_MAX = 255
PATH_MAX = 4096
#: Default bound of a free text field (a prompt, an answer, a comment): 1 MiB of characters.
MAX_TEXT = 1 << 20


def shorten(value: object, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, safe to put in a message."""
    text = repr(value) if not isinstance(value, str) else repr(value.encode("utf-8", "backslashreplace").decode())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def encodable(text: str) -> bool:
    """True when ``text`` encodes as UTF-8 (no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_text(
    value: object,
    field: str,
    *,
    max_len: int = MAX_TEXT,
    required: bool = True,
    empty: bool = False,
    hint: str | None = None,
) -> str | None:
    """``value`` as a string that is valid UTF-8 and at most ``max_len`` characters, else a 400.

    ``required=False`` lets ``None`` through (returned as None); ``empty=False`` refuses ``""``
    and blanks.
    """
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise BadInputError(f"{field} must be a string, got {type(value).__name__}", field=field,
                            hint=hint or f"send {field} as text")  # fmt: skip
    if not empty and not value.strip():
        raise BadInputError(f"{field} must not be empty", field=field, hint=hint or f"send {field} as text")
    if len(value) > max_len:
        raise BadInputError(f"{field} is {len(value):,} characters long; at most {max_len:,}", field=field,
                            hint=hint or f"shorten {field}")  # fmt: skip
    if not encodable(value):
        raise BadInputError(f"{field} {shorten(value)} is not valid UTF-8 (a lone surrogate)", field=field,
                            hint=hint or "send text without unpaired surrogates such as \\ud800")  # fmt: skip
    return value


def check_path(value: str, field: str, *, hint: str | None = None) -> str:
    """``value`` (a name or a path) as the file system can take it: no NUL, valid UTF-8, short enough."""
    check_text(value, field, max_len=PATH_MAX, hint=hint)
    if "\x00" in value:
        raise BadInputError(f"{field} {shorten(value)} holds a NUL character", field=field,
                            hint=hint or "remove the NUL character")  # fmt: skip
    if len(value.encode("utf-8")) > PATH_MAX:
        raise BadInputError(f"{field} is longer than {PATH_MAX} bytes", field=field, hint=hint or f"shorten {field}")
    for part in value.split("/"):
        if len(part.encode("utf-8")) > NAME_MAX:
            raise BadInputError(
                f"{field} {shorten(value)} has a component of {len(part.encode('utf-8'))} bytes; "
                f"file names take at most {NAME_MAX}",
                field=field,
                hint=hint or f"shorten {field}",
            )
    return value


def check_number(
    value: object,
    field: str,
    *,
    low: float | Decimal | None = None,
    high: float | Decimal | None = None,
    low_open: bool = False,
    integer: bool = False,
    hint: str | None = None,
) -> Decimal:
    """``value`` (int, float, Decimal or numeric string) as a finite Decimal in bounds, else a 400.

    ``low_open`` excludes ``low`` itself (``hours`` must be more than 0); ``integer`` refuses fractions.
    """
    between = f"between {low} and {high}" if low is not None and high is not None else ""
    hint = hint or (f"give a number {between}" if between else "give a finite number")
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal, str)):
        raise BadInputError(f"{field}={shorten(value)} is not a number", field=field, hint=hint)
    if isinstance(value, float) and not math.isfinite(value):
        raise BadInputError(f"{field}={value!r} is not a finite number", field=field, hint=hint)
    text = value.strip() if isinstance(value, str) else value
    if isinstance(text, str) and (not text.isascii() or len(text) > 64):
        raise BadInputError(f"{field}={shorten(value)} is not a number", field=field, hint=hint)
    try:
        number = Decimal(repr(text) if isinstance(text, float) else text)
    except (InvalidOperation, ValueError):
        raise BadInputError(f"{field}={shorten(value)} is not a number", field=field, hint=hint) from None
    if not number.is_finite():
        raise BadInputError(f"{field}={shorten(value)} is not a finite number", field=field, hint=hint)
    # compare before any arithmetic: a huge exponent overflows the caller's decimal context
    if low is not None and (number < Decimal(str(low)) or (low_open and number == Decimal(str(low)))):
        raise BadInputError(f"{field} must be {'more than' if low_open else 'at least'} {low}, got {shorten(value)}",
                            field=field, hint=hint)  # fmt: skip
    if high is not None and number > Decimal(str(high)):
        raise BadInputError(f"{field} must be at most {high}, got {shorten(value)}", field=field, hint=hint)
    if integer and number != number.to_integral_value():
        raise BadInputError(f"{field} must be a whole number, got {shorten(value)}", field=field, hint=hint)
    return number


def find_surrogate(value: Any, where: str = "") -> str | None:
    """Where in a JSON document (``spec.name``, ``nodes[3]``) the first string that is not UTF-8 is, else None.

    Iterative (a deep document does not recurse); keys are checked as well as values.
    """
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if not encodable(item):
                return path or "body"
        elif isinstance(item, dict):
            for key, child in item.items():
                name = f"{path}.{key}" if path else str(key)
                if isinstance(key, str) and not encodable(key):
                    return (path or "body") + " (a key)"
                stack.append((child, name.encode("utf-8", "backslashreplace").decode()))
        elif isinstance(item, (list, tuple)):
            items: Iterable[tuple[int, Any]] = enumerate(item)
            stack.extend((child, f"{path}[{i}]") for i, child in items)
    return None
