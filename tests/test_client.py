from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_starverse import __version__
from jupyter_starverse._settings import Settings
from jupyter_starverse.client import Starverse
from jupyter_starverse.errors import BadInputError


def test_info_reports_real_settings(tmp_path: Path) -> None:
    prices = tmp_path / "prices.json"
    doc = {"currency": "eur", "gpus": {"t4": {"on_demand": "0.3"}}, "cpu_node": {"on_demand": "0.05"}}
    prices.write_text(json.dumps(doc))
    settings = Settings.from_env(
        {"STARVERSE_HOME": str(tmp_path), "STARVERSE_STORE": "memory://team", "STARVERSE_BACKEND": "kubernetes",
         "STARVERSE_MODE": "gpu", "STARVERSE_GPU_TYPE": "rtx4090", "STARVERSE_PRICES": str(prices)}
    )
    info = Starverse(settings).info()
    assert (info.version, info.store, info.backend, info.mode, info.gpu_type, info.currency) == (
        __version__, "memory://team", "kubernetes", "gpu", "rtx4090", "EUR")
    assert "memory://team" in str(info)


def test_info_follows_a_recorded_mode(client: Starverse) -> None:
    from jupyter_starverse.modes import Mode

    assert client.info().mode == "cpu"
    client.modes.record(Mode("gpu", "a100-80g", 8))
    assert Starverse(client.settings).info().mode == "gpu"


def test_unknown_backend_is_bad_input(client: Starverse) -> None:
    with pytest.raises(BadInputError, match="unknown backend"):
        client.backend("nope")


def test_jobs_get_the_translation_of_their_own_accelerator(client: Starverse) -> None:
    from jupyter_starverse.jobmodel import JobSpec

    cpu = client.prepare(JobSpec(name="a", code="pass", nodes=2))
    assert (cpu.accelerator, cpu.env["STARVERSE_DIST_BACKEND"], cpu.env["STARVERSE_DEVICE"]) == ("cpu", "gloo", "cpu")
    gpu = client.prepare(JobSpec(name="b", code="pass", accelerator="rtx4090", procs_per_node=8))
    assert (gpu.accelerator, gpu.env["STARVERSE_DIST_BACKEND"]) == ("rtx4090", "nccl")
    assert gpu.env["STARVERSE_DEVICE"] == "cuda"


def test_a_launch_without_gpu_follows_the_workspace_mode(client: Starverse, capsys: pytest.CaptureFixture[str]) -> None:
    from jupyter_starverse.cli import main
    from jupyter_starverse.modes import Mode

    def dry_run(*extra: str) -> str:
        assert main(["launch", "--backend", "kubernetes", "--procs", "8", "--dry-run", "-o", "yaml", *extra]) == 0
        return capsys.readouterr().out

    assert "nvidia.com/gpu" not in dry_run()  # CPU workspace: a CPU job
    client.modes.record(Mode("gpu", "a100-80g", 8))
    assert "nvidia.com/gpu: '8'" in dry_run()  # GPU workspace: GPU pods
    assert "nvidia.com/gpu" not in dry_run("--gpu", "cpu")  # an explicit choice wins
