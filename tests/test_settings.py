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
    [("STARVERSE_BACKEND", "slurm"), ("STARVERSE_MODE", "tpu"), ("STARVERSE_LOCK_TTL", "-1"),
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
