from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jupyter_starverse._settings import Settings
from jupyter_starverse.costs import PriceTable, load_price_table


@pytest.fixture
def cost_settings(tmp_path: Path) -> Settings:
    """Settings rooted in a temporary folder, shipped price table."""
    return Settings.from_env({"STARVERSE_HOME": str(tmp_path / "home"), "STARVERSE_USER": "alice"})


@pytest.fixture
def table(cost_settings: Settings) -> PriceTable:
    return load_price_table(cost_settings)


@pytest.fixture
def write_prices(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Write a price document (dict, or raw text) and return its path."""

    def write(doc: Any, name: str = "prices.json") -> Path:
        path = tmp_path / name
        path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
        return path

    return write


def small_doc(**changes: Any) -> dict[str, Any]:
    """A minimal valid operator price document."""
    doc: dict[str, Any] = {
        "currency": "USD",
        "gpus": {"t4": {"on_demand": "0.35"}},
        "cpu_node": {"on_demand": "0.05"},
        "packages": {"daily": {"hours": 24, "discount": "0.2"}},
    }
    doc.update(changes)
    return doc
