from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_starverse._settings import Settings
from jupyter_starverse.errors import BadInputError


def test_defaults_live_under_home(tmp_path: Path) -> None:
    s = Settings.from_env({"STARVERSE_HOME": str(tmp_path)})
    assert s.store == str(tmp_path / "store")
    assert s.experiments == tmp_path / "experiments"
    assert s.backend == "local"


def test_store_url_is_kept_and_paths_are_absolutised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert Settings.from_env({"STARVERSE_STORE": "s3://bucket/store"}).store == "s3://bucket/store"
    assert Settings.from_env({"STARVERSE_STORE": "rel/store"}).store == str(tmp_path / "rel" / "store")


@pytest.mark.parametrize(
    ("name", "value"),
    [("STARVERSE_BACKEND", "nope"), ("STARVERSE_MODE", "tpu"), ("STARVERSE_LOCK_TTL", "-1"),
     ("STARVERSE_LOCK_TTL", "soon"), ("STARVERSE_KUBE_KIND", "deployment")],
)
def test_bad_values_name_the_variable(name: str, value: str) -> None:
    with pytest.raises(BadInputError, match=name) as info:
        Settings.from_env({name: value})
    assert info.value.field == name


def test_to_env_round_trips(tmp_path: Path) -> None:
    s = Settings.from_env(
        {"STARVERSE_HOME": str(tmp_path), "STARVERSE_CURRENCY": "usd", "STARVERSE_BACKEND": "kubernetes"}
    )
    assert Settings.from_env(s.to_env()) == s


def test_replace_validates(tmp_path: Path) -> None:
    s = Settings.from_env({"STARVERSE_HOME": str(tmp_path)})
    with pytest.raises(BadInputError, match="backend"):
        s.replace(backend="nomad")


def test_shared_group_is_a_name_or_gid_and_round_trips(tmp_path: Path) -> None:
    assert Settings.from_env({"STARVERSE_HOME": str(tmp_path)}).shared_group is None
    for value in ("ml-team", "60100", "team_1"):
        s = Settings.from_env({"STARVERSE_HOME": str(tmp_path), "STARVERSE_SHARED_GROUP": f" {value} "})
        assert s.shared_group == value
        assert s.to_env()["STARVERSE_SHARED_GROUP"] == value
        assert Settings.from_env(s.to_env()) == s
    with pytest.raises(BadInputError, match="STARVERSE_SHARED_GROUP") as info:
        Settings.from_env({"STARVERSE_SHARED_GROUP": "no such/group"})
    assert info.value.field == "STARVERSE_SHARED_GROUP" and "docs/sharing.md" in str(info.value.hint)


def test_every_setting_is_documented_where_a_user_looks() -> None:
    """Each STARVERSE_* variable the settings read appears in README's table or in docs/."""
    import re

    root = Path(__file__).resolve().parents[1]
    read = set(re.findall(r'"(STARVERSE_[A-Z0-9_]+)"', (root / "jupyter_starverse" / "_settings.py").read_text()))
    documented = (root / "README.md").read_text() + "".join(p.read_text() for p in (root / "docs").glob("*.md"))
    missing = sorted(v for v in read if not re.search(rf"\b{v}\b", documented))
    assert len(read) > 40 and not missing, f"document these in README.md or docs/: {missing}"
