"""Streaming readers: jsonl, json, parquet, csv/tsv and txt, local or any fsspec URL.

Every reader yields :class:`Doc` one at a time (a file larger than memory works) and reports
what it could not read as :class:`Malformed` with the file and line number. Bytes that are not
UTF-8 are decoded as GB18030 when that works (Chinese corpora often are), otherwise replaced;
either way the line is reported.
"""

from __future__ import annotations

import codecs
import csv
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from jupyter_starverse.errors import BadInputError, MissingDependencyError, NotFoundError

__all__ = ["FORMATS", "ORIGINS", "Doc", "Malformed", "Source", "list_files", "origin_line", "read_docs"]

FORMATS = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".parquet": "parquet",
    ".csv": "csv",
    ".tsv": "tsv",
    ".txt": "txt",
    ".md": "txt",
}
_COMPRESSED = (".gz", ".bz2", ".xz", ".zst")
#: Beside a version a data step wrote (``data.jsonl``): line N holds ``[file, line]`` of the user's
#: record that became line N of ``data.jsonl`` (``[]`` when the step did not know it), so every
#: step after it, and its reports, name the user's original file and line, not the merged file.
ORIGINS = "_starverse/origins.jsonl"
_WRITTEN = "data.jsonl"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Doc:
    """One record: its place in the corpus (``idx``, file, line), its text and its other fields."""

    idx: int
    file: str
    line: int
    text: str
    row: Mapping[str, Any] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class Malformed:
    """A line that could not be read (``kind`` ``parse``, ``field`` or ``encoding``)."""

    file: str
    line: int
    kind: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "kind": self.kind, "reason": self.reason}


@dataclass(frozen=True)
class Source:
    """Where a corpus lives: an fsspec filesystem, a root and the data files under it (sorted)."""

    fs: Any
    root: str
    files: tuple[str, ...]  # paths relative to root, "/"-separated

    @property
    def size(self) -> int:
        total = 0
        for rel in self.files:
            try:
                total += int(self.fs.size(self._full(rel)) or 0)
            except (OSError, TypeError, ValueError):
                continue
        return total

    def _full(self, rel: str) -> str:
        return self.root if not rel else f"{self.root.rstrip('/')}/{rel}"


def _format_of(name: str) -> str | None:
    lower = name.lower()
    for ext in _COMPRESSED:
        if lower.endswith(ext):
            lower = lower[: -len(ext)]
    return FORMATS.get(PurePosixPath(lower).suffix)


def list_files(location: str) -> Source:
    """The data files of a folder, file or fsspec URL; names starting with ``_`` or ``.`` are skipped."""
    import fsspec

    try:
        fs, root = fsspec.core.url_to_fs(location)
    except (ImportError, ValueError) as e:
        raise BadInputError(
            f"cannot open {location!r}: {e}", field="source", hint="use a folder or an fsspec URL"
        ) from e
    if not fs.exists(root):
        raise NotFoundError(f"{location!r} does not exist", hint="check the path, URL or store name")
    if not fs.isdir(root):
        if _format_of(root) is None:
            raise BadInputError(f"{location!r} is not a data file", field="source", hint=_formats_hint())
        return Source(fs, root, ("",))
    files = []
    base = root.rstrip("/")
    for path in sorted(fs.find(root)):
        rel = path[len(base) :].lstrip("/")
        if any(part.startswith(("_", ".")) for part in rel.split("/")):
            continue  # our reports, hidden files
        if _format_of(rel) is not None:
            files.append(rel)
    if not files:
        raise BadInputError(f"no data files in {location!r}", field="source", hint=_formats_hint())
    return Source(fs, root, tuple(files))


def _formats_hint() -> str:
    return "supported: " + ", ".join(sorted(FORMATS)) + " (optionally .gz/.bz2/.xz/.zst)"


def decode(raw: bytes) -> tuple[str, str | None]:
    """``raw`` as text, and why it was not plain UTF-8 (None when it was)."""
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError:
        pass
    try:
        return raw.decode("gb18030"), "not UTF-8: decoded as GB18030"
    except UnicodeDecodeError:
        return raw.decode("utf-8", errors="replace"), "invalid UTF-8 bytes replaced with U+FFFD"


def _lines(fs: Any, path: str) -> Iterator[tuple[int, bytes]]:
    with fs.open(path, "rb", compression="infer") as f:
        yield from enumerate(f, start=1)


Report = Callable[[Malformed], None]


def _text_of(row: Any, text_field: str) -> str | None:
    if not isinstance(row, Mapping):
        return None
    value = row.get(text_field)
    return value if isinstance(value, str) else None


def _field_missing(name: str, line: int, text_field: str) -> Malformed:
    return Malformed(name, line, "field", f"no text field {text_field!r} (a string)")


def _read_jsonl(
    fs: Any, path: str, name: str, text_field: str, report: Report
) -> Iterator[tuple[int, str, dict[str, Any]]]:
    for n, raw in _lines(fs, path):
        if not raw.strip():
            continue
        text, why = decode(raw)
        if why:
            report(Malformed(name, n, "encoding", why))
        try:
            row = json.loads(text)
        except ValueError as e:
            report(Malformed(name, n, "parse", f"not JSON: {e.args[0] if e.args else e}"))
            continue
        value = _text_of(row, text_field)
        if value is None:
            report(_field_missing(name, n, text_field))
            continue
        yield n, value, row


def _read_txt(
    fs: Any, path: str, name: str, text_field: str, report: Report
) -> Iterator[tuple[int, str, dict[str, Any]]]:
    for n, raw in _lines(fs, path):
        text, why = decode(raw)
        text = text.rstrip("\r\n")
        if not text.strip():
            continue
        if why:
            report(Malformed(name, n, "encoding", why))
        yield n, text, {text_field: text}


def _read_csv(
    fs: Any, path: str, name: str, text_field: str, report: Report, delimiter: str
) -> Iterator[tuple[int, str, dict[str, Any]]]:
    def decoded() -> Iterator[str]:
        for n, raw in _lines(fs, path):
            text, why = decode(raw)
            if why:
                report(Malformed(name, n, "encoding", why))
            yield text

    reader = csv.DictReader(decoded(), delimiter=delimiter)
    if reader.fieldnames is not None and text_field not in reader.fieldnames:
        raise BadInputError(
            f"{name} has no column {text_field!r} (columns: {', '.join(reader.fieldnames)})",
            field="text_field",
            hint="choose the text column with --text-field",
        )
    prev = reader.line_num  # the header's last line
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            report(Malformed(name, reader.line_num, "parse", f"bad CSV: {e}"))
            prev = reader.line_num
            continue
        line, prev = prev + 1, reader.line_num
        if None in row or any(v is None for v in row.values()):
            report(Malformed(name, line, "parse", "wrong number of columns"))
            continue
        yield line, row[text_field], dict(row)


def _read_json(
    fs: Any, path: str, name: str, text_field: str, report: Report
) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """A JSON array of objects (or objects one after another), decoded incrementally."""
    decoder = json.JSONDecoder()
    incremental = codecs.getincrementaldecoder("utf-8")(errors="replace")
    with fs.open(path, "rb", compression="infer") as f:
        buf, pos, line, eof = "", 0, 1, False

        def more() -> None:
            nonlocal buf, pos, eof
            chunk = f.read(_CHUNK)
            eof = not chunk
            text = incremental.decode(chunk, final=eof)
            if "\ufffd" in text:
                report(Malformed(name, line + buf.count("\n", pos), "encoding", "invalid UTF-8 bytes replaced"))
            buf, pos = buf[pos:] + text, 0

        def skip(chars: str) -> None:
            nonlocal pos, line
            while True:
                start = pos
                while pos < len(buf) and buf[pos] in chars:
                    pos += 1
                line += buf.count("\n", start, pos)
                if pos < len(buf) or eof:
                    return
                more()

        more()
        skip(" \t\r\n")
        if pos < len(buf) and buf[pos] == "[":
            pos += 1
        elif pos < len(buf) and buf[pos] != "{":
            raise BadInputError(f"{name} is not a JSON array", field="source", hint="use .jsonl for JSON lines")
        while True:
            skip(" \t\r\n,")
            if pos >= len(buf) or buf[pos] == "]":
                return
            try:
                row, end = decoder.raw_decode(buf, pos)
            except ValueError as e:
                if not eof and len(buf) - pos < 64 * _CHUNK:
                    more()
                    continue
                report(Malformed(name, line, "parse", f"not JSON: {e.args[0] if e.args else e}"))
                return
            value = _text_of(row, text_field)
            if value is None:
                report(_field_missing(name, line, text_field))
            else:
                yield line, value, row
            line += buf.count("\n", pos, end)
            pos = end
            if len(buf) - pos < _CHUNK // 4 and not eof:
                more()


def _read_parquet(
    fs: Any, path: str, name: str, text_field: str, report: Report
) -> Iterator[tuple[int, str, dict[str, Any]]]:
    try:
        import pyarrow.parquet as pq  # type: ignore[import-untyped]
    except ImportError as e:
        raise MissingDependencyError("pyarrow", extra="data", purpose="reading parquet") from e
    with fs.open(path, "rb") as f:
        pf = pq.ParquetFile(f)
        if text_field not in pf.schema_arrow.names:
            raise BadInputError(
                f"{name} has no column {text_field!r} (columns: {', '.join(pf.schema_arrow.names)})",
                field="text_field",
                hint="choose the text column with --text-field",
            )
        n = 0
        for batch in pf.iter_batches(batch_size=4096):
            for row in batch.to_pylist():
                n += 1
                value = _text_of(row, text_field)
                if value is None:
                    report(_field_missing(name, n, text_field))
                    continue
                yield n, value, row


def origin_line(doc: Doc) -> str:
    """The line of :data:`ORIGINS` for ``doc`` written out: where the user's record is."""
    return json.dumps([doc.file, doc.line] if doc.file else [], ensure_ascii=False) + "\n"


def _origins(source: Source, rel: str) -> Iterator[tuple[str, int] | None] | None:
    """The origins of a written version's ``data.jsonl`` in line order, or None when it has none."""
    if rel != _WRITTEN:
        return None
    path = source._full(ORIGINS)
    try:
        if not source.fs.isfile(path):
            return None
    except OSError:
        return None

    def lines() -> Iterator[tuple[str, int] | None]:
        with source.fs.open(path, "rb") as f:
            for raw in f:
                try:
                    found = json.loads(raw)
                except ValueError:
                    found = None
                ok = isinstance(found, list) and len(found) == 2 and isinstance(found[0], str)
                yield (found[0], int(found[1])) if ok and isinstance(found[1], int) else None

    return lines()


def _traced(rows: Iterator[tuple[int, str, Any]], origins: Iterator[tuple[str, int] | None],
            ) -> Iterator[tuple[str | None, int, str, Any]]:  # fmt: skip
    """``rows`` of ``data.jsonl`` with the origin of each line (None where it has none)."""
    at, origin = 0, None
    for line, text, row in rows:
        while at < line:  # blank or unreadable lines have an origin line too
            origin = next(origins, None)
            at += 1
        yield (origin[0] if origin else None), (origin[1] if origin else line), text, row


def read_docs(
    source: Source, *, text_field: str = "text", report: Report | None = None, start: int = 0
) -> Iterator[Doc]:
    """Every readable record of ``source`` in a fixed order (files sorted, then line order).

    A version written by a data step names each record by the user's file and line it came from
    (:data:`ORIGINS`), however many steps lie between; what cannot be read is still reported at
    its line of ``data.jsonl``."""
    report = report or (lambda m: None)
    idx = start
    for rel in source.files:
        path = source._full(rel)
        name = rel or PurePosixPath(path).name
        fmt = _format_of(name) or "txt"
        if fmt == "jsonl":
            rows = _read_jsonl(source.fs, path, name, text_field, report)
        elif fmt == "json":
            rows = _read_json(source.fs, path, name, text_field, report)
        elif fmt == "parquet":
            rows = _read_parquet(source.fs, path, name, text_field, report)
        elif fmt in ("csv", "tsv"):
            rows = _read_csv(source.fs, path, name, text_field, report, "," if fmt == "csv" else "\t")
        else:
            rows = _read_txt(source.fs, path, name, text_field, report)
        origins = _origins(source, rel)
        if origins is not None:
            for file, line, text, row in _traced(rows, origins):
                yield Doc(idx, file or name, line, text, row)
                idx += 1
            continue
        for line, text, row in rows:
            yield Doc(idx, name, line, text, row)
            idx += 1
