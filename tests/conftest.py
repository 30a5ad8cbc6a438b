"""Shared fixtures: every test runs with its own STARVERSE_HOME, store and experiments root.

``jp_fetch`` and friends come from pytest-jupyter; the server runs with our extension
enabled and unauthenticated access switched off.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_starverse._settings import Settings
from jupyter_starverse.client import Starverse
from tests._tmpfs import small_fs  # noqa: F401 (fixtures for every test package)
from tests._users import shared_tmp  # noqa: F401

pytest_plugins = ("pytest_jupyter.jupyter_server",)


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No test sees the developer's STARVERSE_*/HF_* variables or writes under their home."""
    for key in list(os.environ):
        if key.startswith(("STARVERSE_", "HF_", "HUGGINGFACE_")):
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("STARVERSE_HOME", str(tmp_path / "sv-home"))
    monkeypatch.setenv("STARVERSE_USER", "tester")
    monkeypatch.setenv("STARVERSE_MODE", "cpu")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("STARVERSE_WARM_POOL", "off")  # no test leaves a warm pool behind, unless it asks for one
    yield


@pytest.fixture
def settings() -> Settings:
    """Settings of the isolated environment (store and experiments under STARVERSE_HOME)."""
    return Settings.from_env()


@pytest.fixture
def client(settings: Settings) -> Starverse:
    return Starverse(settings)


@pytest.fixture
def ip() -> Iterator[Any]:
    """The test IPython shell with ``%load_ext jupyter_starverse`` done."""
    from IPython.core.getipython import get_ipython
    from IPython.testing.globalipapp import start_ipython

    shell = start_ipython() or get_ipython()  # start_ipython returns None once started
    shell.run_line_magic("load_ext", "jupyter_starverse")
    yield shell
    shell.run_line_magic("unload_ext", "jupyter_starverse")


@pytest.fixture
def jp_server_config() -> dict[str, Any]:
    """Our extension on, unauthenticated access off (pytest-jupyter sends a token)."""
    return {
        "ServerApp": {
            "jpserver_extensions": {"jupyter_starverse": True},
            "allow_unauthenticated_access": False,
        }
    }


# -- where the suite's time goes ---------------------------------------------------------------
# ``--durations`` names the slowest tests; CI's budget is spent by files and areas, so the summary
# also adds each file's setup + call + teardown up and prints the largest, with each area's total.
_FILE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::", 1)[0]
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _FILE_SECONDS:
        return
    areas: dict[str, float] = {}
    for path, seconds in _FILE_SECONDS.items():
        parts = path.split("/")
        area = "/".join(parts[:2]) if len(parts) > 2 else path
        areas[area] = areas.get(area, 0.0) + seconds
    total = sum(_FILE_SECONDS.values())
    terminalreporter.write_sep("=", f"time by area and by file (of {total:.0f} s in tests)")
    for area, seconds in sorted(areas.items(), key=lambda kv: -kv[1])[:15]:
        terminalreporter.write_line(f"{seconds:8.1f} s {seconds / total:6.1%}  {area}")
    terminalreporter.write_line("")
    for path, seconds in sorted(_FILE_SECONDS.items(), key=lambda kv: -kv[1])[:25]:
        terminalreporter.write_line(f"{seconds:8.1f} s {seconds / total:6.1%}  {path}")
