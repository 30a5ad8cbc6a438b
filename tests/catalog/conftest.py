"""Fixtures for catalog tests: an isolated store, a Hub stand-in and a plain HTTP server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_starverse._settings import Settings
from jupyter_starverse.catalog import Catalog
from tests.catalog.servers import FileServer, HubServer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def store_env(tmp_path: Path) -> dict[str, str]:
    return {"STARVERSE_HOME": str(tmp_path / "home"), "STARVERSE_LOCK_TTL": "5"}


@pytest.fixture
def catalog(store_env: dict[str, str]) -> Catalog:
    return Catalog(Settings.from_env(store_env))


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    server = HubServer()
    server.start()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    yield server
    server.stop()


@pytest.fixture
def files() -> Iterator[FileServer]:
    server = FileServer()
    server.start()
    yield server
    server.stop()


def worker_env(store_env: dict[str, str], **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STARVERSE_", "HF_"))}
    env.update(store_env)
    env.update(extra)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["HF_HUB_DISABLE_TELEMETRY"] = "1"
    return env


def start_workers(n: int, args: list[str], env: dict[str, str], go: Path) -> list[subprocess.Popen[str]]:
    """Start ``n`` worker processes and release them at the same moment."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.catalog.worker", str(go), *args],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]
    deadline = time.monotonic() + 120
    while len(list(go.parent.glob(f"{go.name}.ready.*"))) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    go.touch()
    return procs


def run_workers(n: int, args: list[str], env: dict[str, str], go: Path) -> list[dict[str, object]]:
    """Run ``n`` workers at once and return their JSON answers."""
    out = []
    for p in start_workers(n, args, env, go):
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stderr
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out
