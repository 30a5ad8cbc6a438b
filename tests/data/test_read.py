"""Readers stream every format, name malformed lines by number and survive bad encodings."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from jupyter_starverse.data import Malformed, list_files, read_docs
from jupyter_starverse.errors import BadInputError, NotFoundError


def _read(location: str, **kw: object) -> tuple[list[tuple[str, int, str]], list[Malformed]]:
    bad: list[Malformed] = []
    docs = [(d.file, d.line, d.text) for d in read_docs(list_files(location), report=bad.append, **kw)]  # type: ignore[arg-type]
    return docs, bad


def test_jsonl_reports_malformed_lines_by_number_and_decodes_gbk(tmp_path: Path) -> None:
    raw = (
        b'{"text": "one"}\nnot json\n\n{"title": "no text"}\n'
        + '{"text": "中文"}\n'.encode("gbk")
        + b'{"text": "\xff\xfe bad"}\n'
    )
    (tmp_path / "a.jsonl").write_bytes(raw)
    docs, bad = _read(str(tmp_path))
    assert [(d[1], d[2]) for d in docs][:2] == [(1, "one"), (5, "中文")]
    assert [(m.line, m.kind) for m in bad] == [(2, "parse"), (4, "field"), (5, "encoding"), (6, "encoding")]
    assert "GB18030" in bad[2].reason
    assert len(docs) == 3  # the replaced line is still read


def test_every_format_and_compression_and_the_text_field(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "a.json").write_text(json.dumps([{"body": "j1"}, {"body": "j2"}], indent=1))
    (tmp_path / "b.csv").write_text('body,n\n"c1, with comma",1\nc2\n"c3",3\n')
    pq.write_table(pa.table({"body": ["p1", "p2"], "n": [1, 2]}), tmp_path / "c.parquet")
    (tmp_path / "d.txt").write_text("t1\n\nt2\n")
    with gzip.open(tmp_path / "e.jsonl.gz", "wt") as f:
        f.write('{"body": "g1"}\n')
    (tmp_path / "_starverse").mkdir()
    (tmp_path / "_starverse" / "report.json").write_text("{}")  # our own files are skipped
    docs, bad = _read(str(tmp_path), text_field="body")
    assert [d[2] for d in docs] == ["j1", "j2", "c1, with comma", "c3", "p1", "p2", "t1", "t2", "g1"]
    assert [(m.file, m.line, m.kind) for m in bad] == [("b.csv", 3, "parse")]
    assert [d[1] for d in docs if d[0] == "d.txt"] == [1, 3]


def test_fsspec_urls_work(tmp_path: Path) -> None:
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe("/corpus/x.jsonl", b'{"text": "in memory"}\n')
    docs, _ = _read("memory://corpus")
    assert [d[2] for d in docs] == ["in memory"]


def test_missing_column_and_no_data_are_clear_errors(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("title\nx\n")
    with pytest.raises(BadInputError, match="no column 'text'"):
        _read(str(tmp_path))
    with pytest.raises(NotFoundError):
        list_files(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "x.bin").write_bytes(b"1")
    with pytest.raises(BadInputError, match="no data files"):
        list_files(str(tmp_path / "empty"))


def test_a_big_json_array_streams_in_chunks(tmp_path: Path) -> None:
    rows = [{"text": f"row {i} " + "x" * 300} for i in range(6000)]  # ~2 MiB: more than one read chunk
    (tmp_path / "big.json").write_text(json.dumps(rows))
    docs, bad = _read(str(tmp_path))
    assert len(docs) == 6000 and not bad
    assert docs[-1][2].startswith("row 5999")
