"""Name and path validation: nothing a user types can leave the store."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_starverse.catalog import Catalog, DatasetRef, ModelRef, parse_ref
from jupyter_starverse.catalog._names import safe_join
from jupyter_starverse.errors import InvalidNameError


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "a/b",
        "../x",
        "..",
        ".hidden",
        "/etc/passwd",
        "a\\b",
        "a..b",
        "x@",
        "x@../y",
        "x@a/b",
        "naïve",
        "a b",
        42,
        None,
    ],
)
def test_bad_dataset_names_are_rejected(text: object) -> None:
    with pytest.raises(InvalidNameError) as err:
        parse_ref(text)
    assert err.value.hint


@pytest.mark.parametrize(
    "text",
    [
        "hf:",
        "hf:gpt2",
        "hf:a/b/c",
        "hf:../b",
        "hf:a/..",
        "hf:a/b@",
        "hf:a/b@../main",
        "hf:a/b@/main",
        "hf:a/b@main/",
        "hf:a--x/b",
        "hf:/abs/path",
        "hf:a/b@x y",
    ],
)
def test_malformed_hf_specs_are_rejected(text: str) -> None:
    with pytest.raises(InvalidNameError, match="not a valid model reference") as err:
        parse_ref(text)
    assert "hf:ORG/REPO" in str(err.value)


def test_good_refs_parse() -> None:
    assert parse_ref("mnist") == DatasetRef("mnist")
    assert parse_ref("mnist@v2") == DatasetRef("mnist", "v2")
    assert parse_ref("hf:openai-community/gpt2") == ModelRef("openai-community", "gpt2", "main")
    ref = parse_ref("hf:org/repo@refs/pr/1")
    assert isinstance(ref, ModelRef) and ref.revision_key == "refs%2Fpr%2F1"


@pytest.mark.parametrize("rel", ["../x", "a/../../x", "/abs", "a//b", "", "a\\..\\b", "a/\x00"])
def test_safe_join_refuses_escapes(tmp_path: Path, rel: str) -> None:
    with pytest.raises(InvalidNameError):
        safe_join(tmp_path, rel)


def test_safe_join_keeps_inside(tmp_path: Path) -> None:
    assert safe_join(tmp_path, "a/b.txt") == tmp_path / "a" / "b.txt"


@pytest.mark.parametrize("name", ["../escape", "/tmp/x", "a/b", ".."])
def test_catalog_api_rejects_escaping_names(catalog: Catalog, tmp_path: Path, name: str) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_text("x")
    with pytest.raises(InvalidNameError):
        catalog.add_dataset(name, str(src))
    for call in (catalog.pull, catalog.mount, catalog.status, catalog.rm):
        with pytest.raises(InvalidNameError):
            call(name)
    assert not any(p.name == "escape" for p in tmp_path.rglob("*"))
