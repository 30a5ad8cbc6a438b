from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_starverse import __version__


async def test_info_returns_settings_as_json(jp_fetch: Any, tmp_path: Path) -> None:
    response = await jp_fetch("jupyter-starverse", "info")
    assert response.code == 200
    assert response.headers["Content-Type"].startswith("application/json")
    body = json.loads(response.body)
    assert body["version"] == __version__
    assert body["store"] == str(tmp_path / "sv-home" / "store")
    assert body["backend"] == "local"
    assert body["mode"] == "cpu"
    assert body["currency"] == "CNY"


async def test_info_without_token_is_forbidden(jp_fetch: Any) -> None:
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch("jupyter-starverse", "info", headers={"Authorization": ""})
    assert info.value.code == 403
