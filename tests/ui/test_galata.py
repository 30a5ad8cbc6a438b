"""Runs the galata UI tests (real JupyterLab, headless Debian Chromium) from pytest.

The Playwright output is streamed to the terminal so CI logs show each UI test; the
screenshots land in tests/ui/artifacts/.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")

# npm install plus every spec in one JupyterLab: far longer than a unit test.
pytestmark = [pytest.mark.ui, pytest.mark.slow, pytest.mark.timeout(2700)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STARVERSE_", "HF_"))}
    # jupyter and jlpm of this interpreter's environment come first.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["STARVERSE_UI_ROOT"] = str(tmp_path / "ui-root")
    env["CHROMIUM_PATH"] = CHROMIUM
    env["STARVERSE_UI_PORT"] = str(_free_port())
    env.setdefault("CI", "1")
    if "YARN_NPM_REGISTRY_SERVER" not in env and shutil.which("npm"):
        # yarn ignores npm's registry setting: use the one npm is configured with.
        env["YARN_NPM_REGISTRY_SERVER"] = subprocess.run(
            ["npm", "config", "get", "registry"], capture_output=True, text=True, check=True
        ).stdout.strip()
    return env


def test_jupyterlab_ui_in_headless_chromium(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"Chromium not found at {CHROMIUM}: install Debian's chromium (apt-get install -y chromium)")
    env = _env(tmp_path)
    jlpm = [str(Path(sys.executable).parent / "jlpm")]  # installed with jupyterlab
    (HERE / "artifacts").mkdir(exist_ok=True)
    with capfd.disabled():
        print("\n== galata: installing UI test packages ==", flush=True)
        subprocess.run([*jlpm, "install", "--immutable"], cwd=HERE, env=env, check=True)
        print("== galata: running UI tests ==", flush=True)
        result = subprocess.run([*jlpm, "playwright", "test"], cwd=HERE, env=env)
    assert result.returncode == 0, "galata UI tests failed (see the Playwright output above, tests/ui/test-results/)"
    assert (HERE / "artifacts" / "starverse-panel.png").stat().st_size > 0
