"""Issue 27: a bare NAME means the newest original version; a job records the exact version it mounted."""

from __future__ import annotations

from pathlib import Path

from jupyter_starverse.cli import main
from jupyter_starverse.client import Starverse
from jupyter_starverse.jobmodel import JobSpec


def _folder(tmp_path: Path, name: str, docs: int) -> str:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "a.txt").write_text("doc\n" * docs)
    return str(folder)


def test_derived_versions_never_replace_the_original_and_jobs_record_the_version(
    client: Starverse, tmp_path: Path, capsys: object
) -> None:
    cat = client.catalog
    cat.add_dataset("corpus", _folder(tmp_path, "raw", 111))
    cat.add_dataset("corpus", _folder(tmp_path, "clean", 6), version="1-clean", derived_from="corpus@1")
    cat.add_dataset("corpus", _folder(tmp_path, "dedup", 5), version="1-clean-dedup", derived_from="corpus@1-clean")
    cat.add_dataset("corpus", _folder(tmp_path, "old", 4), version="1-score")  # a record from before derived_from
    assert cat.entry("corpus").ref == "corpus@1"  # the newest *original*, whatever steps ran since
    assert cat.entry("corpus@1-clean-dedup").derived_from == "corpus@1-clean"

    spec = client.prepare(JobSpec(name="t", script="train.py", mounts=("corpus", "corpus@1-clean")))
    assert spec.mount_versions == {"corpus": "corpus@1", "corpus@1-clean": "corpus@1-clean"}
    assert JobSpec.from_json(spec.to_json()).mount_versions == spec.mount_versions  # in spec.json

    cat.add_dataset("corpus", _folder(tmp_path, "v2", 50), version="2")  # a new original does move the name
    assert cat.entry("corpus").ref == "corpus@2"

    assert main(["store", "ls"]) == 0
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "corpus: 1 -> 1-clean -> 1-clean-dedup" in out
