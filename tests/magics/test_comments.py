"""A ``%sv`` line may end in a shell comment, as the README's cells do."""

from __future__ import annotations

from typing import Any

import pytest

from jupyter_starverse.magics import strip_comment


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("info   # version, store", "info   "),
        ("#all of it", ""),
        ("store pull hf:x --allow 'data/en/*'   # one subset", "store pull hf:x --allow 'data/en/*'   "),
        ("launch t.py --env A=b#c", "launch t.py --env A=b#c"),  # inside a word: no comment
        ("a '#x' \"# y\" # z", "a '#x' \"# y\" "),  # in quotes: no comment
        ("a\\ #b", "a\\ #b"),  # an escaped space joins the word
    ],
)
def test_strip_comment(line: str, expected: str) -> None:
    assert strip_comment(line) == expected


def test_line_with_comment_runs(ip: Any) -> None:
    result = ip.run_line_magic("sv", "cost estimate --gpu rtx4090 --cards 32 --hours 4     # 230.40 CNY")
    assert "230.40" in str(result)
