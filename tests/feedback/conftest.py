"""Fixtures for feedback tests: a facade on an isolated store and a tiny Llama on the loopback Hub."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_starverse.client import Starverse
from tests._tiny import build_tiny_llama, publish
from tests.catalog.conftest import hub  # noqa: F401  (the loopback Hub fixture)
from tests.catalog.servers import HubServer


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture
def client(settings) -> Starverse:  # type: ignore[no-untyped-def]
    return Starverse(settings)


@pytest.fixture
def tiny_ref(hub: HubServer, tiny_folder: Path, client: Starverse) -> str:  # noqa: F811
    """``hf:team/tiny@main``, pulled into the store through the real hf: path."""
    publish(hub, "team/tiny", tiny_folder)
    client.catalog.pull("hf:team/tiny@main")
    return "hf:team/tiny@main"
