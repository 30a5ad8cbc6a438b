"""c.StarverseApp.* traits override the STARVERSE_* environment."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    prices = tmp_path / "ops-prices.json"
    prices.write_text(json.dumps({"currency": "usd", "gpus": {"h100-80g": {"on_demand": "2.5"}},
                                  "cpu_node": {"on_demand": "0.04"}}))
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_starverse": True}, "allow_unauthenticated_access": False},
        "StarverseApp": {"store": str(tmp_path / "team-store"), "backend": "kubernetes", "prices_file": str(prices)},
    }


async def test_traitlets_override_environment(jp_fetch: Any, tmp_path: Path) -> None:
    body = json.loads((await jp_fetch("jupyter-starverse", "info")).body)
    assert body["store"] == str(tmp_path / "team-store")
    assert body["backend"] == "kubernetes"
    assert body["currency"] == "USD"
