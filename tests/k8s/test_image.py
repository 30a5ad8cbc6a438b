"""The job image: its torch is one the runtime runs on, and a pod with an older torch says so at once.

Issue 38: the Dockerfile was ``FROM pytorch/pytorch:2.5.1`` while the runtime and the tp template
import ``torch.distributed.fsdp.fully_shard`` (public from torch 2.6): fsdp and tp jobs failed
with an ImportError in the image the project tells clusters to pull.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_starverse.backends.kubernetes._checks import BOOT, MIN_TORCH

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "docs" / "image" / "Dockerfile"


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text.split("+")[0])[:3])


def _args(text: str) -> dict[str, str]:
    return dict(re.findall(r"^ARG\s+([A-Z_]+)=(\S+)", text, flags=re.M))


def _image_torch(text: str) -> tuple[int, ...]:
    """The torch an image built from ``text`` (with its default build args) ends up with."""
    args = _args(text)
    installs = re.search(r'pip install [^\n]*"torch==\$\{TORCH_VERSION\}"', text)
    if installs:  # installed over whatever the base brought
        return _version(args["TORCH_VERSION"])
    base = args["BASE"]
    assert base.startswith("pytorch/pytorch:"), f"no torch in the image: {base} without a torch install"
    return _version(base.split(":", 1)[1])


def _train_pin() -> tuple[int, ...]:
    found = re.search(r"^train\s*=\s*\[([^\]]*)\]", (ROOT / "pyproject.toml").read_text(), flags=re.M)
    assert found, "pyproject.toml has a train extra"
    [torch] = [d for d in re.findall(r'"([^"]+)"', found.group(1)) if re.match(r"torch\b", d)]
    assert "==" in torch, f"the train extra pins torch exactly: {torch}"
    return _version(torch.split("==", 1)[1])


def test_the_image_torch_is_the_train_pin_and_at_least_the_runtime_minimum() -> None:
    text = DOCKERFILE.read_text()
    torch = _image_torch(text)
    assert torch == _train_pin(), (torch, _train_pin())
    assert torch[:2] >= MIN_TORCH, f"the image's torch {torch} is older than the runtime's {MIN_TORCH}"
    base = _args(text)["BASE"]
    if base.startswith("pytorch/pytorch:"):  # a torch base must not be older either
        assert _version(base.split(":", 1)[1])[:2] >= MIN_TORCH, base


def test_the_parser_sees_the_old_base() -> None:
    """The check above fails on the Dockerfile before the fix (FROM pytorch/pytorch:2.5.1)."""
    old = "ARG BASE=pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime\nFROM ${BASE}\nRUN pip install numpy\n"
    assert _image_torch(old) == (2, 5, 1) and _image_torch(old)[:2] < MIN_TORCH


def test_the_runtime_really_needs_the_minimum() -> None:
    """MIN_TORCH is where ``fully_shard`` became public: the runtime imports it from there."""
    source = (ROOT / "jupyter_starverse" / "runtime" / "_dist.py").read_text()
    assert "from torch.distributed.fsdp import fully_shard" in source and MIN_TORCH == (2, 6)


def _fake_torch(tmp_path: Path, version: str) -> Path:
    pkg = tmp_path / version / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(f"__version__ = {version!r}\n")
    (tmp_path / version / "jupyter_starverse").mkdir()
    (tmp_path / version / "jupyter_starverse" / "__init__.py").write_text("")
    (tmp_path / version / "hello.py").write_text("print('ran the job')\n")
    return tmp_path / version


@pytest.mark.parametrize(("version", "runs"), [("2.5.1+cu124", False), ("2.6.0", True), ("2.13.0+cu128", True)])
def test_a_pod_with_a_too_old_torch_stops_at_boot_naming_it(tmp_path: Path, version: str, runs: bool) -> None:
    path = _fake_torch(tmp_path, version)
    done = subprocess.run(
        [sys.executable, "-S", "-c", BOOT, "torch,jupyter_starverse", "hello"],
        capture_output=True, text=True, env={"PYTHONPATH": str(path)}, timeout=60,
    )  # fmt: skip
    if runs:
        assert done.returncode == 0 and "ran the job" in done.stdout, done.stderr
    else:
        assert done.returncode == 2 and "ran the job" not in done.stdout
        assert f"this image has torch {version}, too old" in done.stderr and "torch >= 2.6" in done.stderr
        assert "docs/image/Dockerfile" in done.stderr
    # a --command job (torch only) brings its own launcher: not refused for the runtime's minimum
    cmd = subprocess.run([sys.executable, "-S", "-c", BOOT, "torch", "hello"], capture_output=True, text=True,
                         env={"PYTHONPATH": str(path)}, timeout=60)  # fmt: skip
    assert cmd.returncode == 0, cmd.stderr
