"""The package is ruff- and mypy-clean (strict); a regression fails the suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_is_clean() -> None:
    done = _run(str(BIN / "ruff"), "check", "jupyter_starverse", "tests", "benchmarks")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
def test_mypy_strict_is_clean() -> None:
    done = _run(str(BIN / "mypy"), "jupyter_starverse")
    assert done.returncode == 0, done.stdout + done.stderr
