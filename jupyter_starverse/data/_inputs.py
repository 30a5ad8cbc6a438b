"""What the data steps check and share before they run: a step's input, its names and units.

:class:`_Input` is a resolved source (its label, the files to read, the provenance so far and
the store version it came from); the checks of a text field, sensitive types and thresholds in
(0, 1] give the same errors from every front door; :func:`_write_text` writes by temp + rename.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from jupyter_starverse._inputs import check_text
from jupyter_starverse.catalog import DatasetRef
from jupyter_starverse.errors import BadInputError

from ._pii import PII_TYPES
from ._read import Source

Say = Callable[[str], None]
STEPS = ("scan", "clean", "dedup", "score")
#: Longest name of the text field (a JSON key or a CSV column); it is repeated in the report.
MAX_FIELD = 256


class _Input:
    def __init__(self, label: str, source: Source, provenance: list[dict[str, Any]], ref: DatasetRef | None) -> None:
        self.label, self.source, self.provenance, self.ref = label, source, provenance, ref


def _text_field(value: object) -> str:
    """The name of the text field: a short UTF-8 string (it is repeated in every report line about it)."""
    text = check_text(
        value,
        "text_field",
        max_len=MAX_FIELD,
        hint=f"the JSON key or CSV column, at most {MAX_FIELD} characters, e.g. text",
    )
    assert text is not None
    return text


def _types(types: Sequence[str] | None) -> tuple[str, ...]:
    if not types:
        return PII_TYPES
    bad = [t for t in types if t not in PII_TYPES]
    if bad:
        raise BadInputError(f"unknown sensitive type {bad[0]!r}", field="types", hint=f"types: {', '.join(PII_TYPES)}")
    return tuple(types)


def _check_unit(name: str, value: float) -> None:
    if not isinstance(value, int | float) or not 0.0 < float(value) <= 1.0:
        raise BadInputError(f"{name} must be in (0, 1], not {value!r}", field=name, hint="e.g. 0.7")


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
