"""The jobs routes make their backend in the thread pool: a slow backend (a kube config read, a cluster
probe) never holds up the event loop, so other requests answer meanwhile."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest

from jupyter_starverse.client import Starverse

NAMESPACE = "jupyter-starverse"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", ("jobs", "j-1")),
        ("POST", ("jobs", "j-1", "cancel")),
        ("GET", ("jobs", "j-1", "logs")),
        ("GET", ("jobs", "j-1", "tensorboard")),
    ],
)
async def test_a_slow_backend_does_not_block_other_requests(
    jp_fetch: Any, monkeypatch: pytest.MonkeyPatch, method: str, path: tuple[str, ...]
) -> None:
    release = threading.Event()
    entered = threading.Event()
    real = Starverse.backend
    order: list[str] = []

    def slow_backend(self: Starverse, *args: Any, **kwargs: Any) -> Any:
        entered.set()
        release.wait(10)  # on the event loop this would stall the server for 10 s
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Starverse, "backend", slow_backend)

    async def slow() -> None:
        kwargs = {"body": "{}"} if method == "POST" else {}
        try:
            await jp_fetch(NAMESPACE, *path, method=method, raise_error=False, **kwargs)
        finally:
            order.append("slow")

    task = asyncio.ensure_future(slow())
    while not entered.is_set():
        await asyncio.sleep(0.01)
    r = await jp_fetch(NAMESPACE, "info")  # answers while the backend is still being made
    order.append("info")
    assert json.loads(r.body)
    release.set()
    await task
    assert order == ["info", "slow"]
