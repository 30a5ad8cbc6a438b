"""GPU mode on a machine without a GPU: the core refuses it or warns, and every door says the same.

Issue 38: REST ``mode/plan`` and ``PUT mode`` answered ``"warnings": []`` and 6.50/h on a machine
without a GPU; only the CLI warned. Issue 27: GPU mode could be switched on there, and every
launch then failed with an error naming internal fields.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_starverse._settings import Settings
from jupyter_starverse.cli import main
from jupyter_starverse.errors import ConflictError
from jupyter_starverse.modes import Mode, ModeService


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STARVERSE_LOCAL_GPU", "no")
    monkeypatch.setenv("STARVERSE_WORKSPACE", "local")
    monkeypatch.setenv("STARVERSE_MODE", "cpu")


@pytest.fixture
def to_a_cluster(no_gpu: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STARVERSE_BACKEND", "kubernetes")


def _service(settings: Settings, **changes: Any) -> ModeService:
    return ModeService(settings.replace(local_gpu="no", default_mode="cpu", **changes))


def test_the_core_refuses_gpu_mode_when_jobs_would_run_here(settings: Settings) -> None:
    service = _service(settings)
    for attempt in (service.plan, service.switch):
        with pytest.raises(ConflictError) as err:
            attempt("gpu")
        assert "GPU mode needs a GPU, and this machine has no GPU" in err.value.message
        hint = err.value.hint or ""
        assert "STARVERSE_BACKEND=kubernetes or slurm" in hint and "--backend kubernetes --gpu TYPE" in hint
        assert "JobSpec" not in err.value.message + hint and "accelerator=" not in err.value.message + hint
    assert service.current() == Mode("cpu")
    assert service.plan("cpu").warnings == ()  # CPU mode is always fine


def test_with_a_cluster_backend_gpu_mode_warns_and_the_workspace_price_stays(settings: Settings) -> None:
    service = _service(settings, backend="slurm")
    plan = service.plan("gpu", gpu_type="a100-80g")
    [warning] = plan.warnings
    assert "this machine has no GPU" in warning and "kernels here stay on the CPU" in warning and "slurm" in warning
    assert plan.price.before == plan.price.after and plan.price.difference == 0  # not +6.40/h
    result = service.switch("gpu", gpu_type="a100-80g")
    assert "warning: this machine has no GPU" in str(result)
    assert service.current() == Mode("gpu", "a100-80g", 1)  # jobs follow GPU mode onto the cluster
    assert str(service.status().price_per_hour) == "0.1"  # the status bar: the workspace's CPU price
    again = service.plan("gpu")
    assert not again.changes and again.warnings and "warning: this machine has no GPU" in str(again)


def test_a_machine_with_a_gpu_switches_without_a_warning(settings: Settings) -> None:
    service = ModeService(settings.replace(local_gpu="yes", default_mode="cpu"))
    plan = service.plan("gpu", gpu_type="a100-80g")
    assert plan.warnings == () and plan.price.difference is not None and plan.price.difference > 0


def test_cli_and_magic_say_the_same(no_gpu: None, capsys: pytest.CaptureFixture[str], ip: Any) -> None:
    assert main(["mode", "gpu", "--dry-run"]) == 4
    err = capsys.readouterr().err
    assert "GPU mode needs a GPU" in err and "STARVERSE_BACKEND" in err
    assert main(["mode", "gpu"]) == 4
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="GPU mode needs a GPU"):
        ip.run_line_magic("sv", "mode gpu --dry-run")


def test_cli_warns_when_jobs_go_to_a_cluster(to_a_cluster: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mode", "gpu", "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["warnings"] and float(plan["price"]["difference_per_hour"]) == 0


async def _get(jp_fetch: Any, *path: str, **kwargs: Any) -> tuple[int, Any]:
    try:
        reply = await jp_fetch("jupyter-starverse", *path, **kwargs)
    except HTTPClientError as e:
        assert e.response is not None
        return e.code, json.loads(e.response.body)
    return reply.code, json.loads(reply.body)


async def test_rest_refuses_gpu_mode_here_with_the_same_hint(no_gpu: None, jp_fetch: Any) -> None:
    code, err = await _get(jp_fetch, "mode", "plan", params={"kind": "gpu"})
    assert code == 409 and "GPU mode needs a GPU" in err["message"] and "STARVERSE_BACKEND" in err["hint"]
    body = json.dumps({"kind": "gpu", "gpu_type": "a100-80g"})
    code, err = await _get(jp_fetch, "mode", method="PUT", body=body)
    assert code == 409 and "GPU mode needs a GPU" in err["message"]
    code, status = await _get(jp_fetch, "mode")
    assert code == 200 and status["mode"]["kind"] == "cpu"


async def test_rest_warns_and_keeps_the_price_when_jobs_go_to_a_cluster(to_a_cluster: None, jp_fetch: Any) -> None:
    code, plan = await _get(jp_fetch, "mode", "plan", params={"kind": "gpu"})
    assert code == 200 and plan["warnings"] and "this machine has no GPU" in plan["warnings"][0]
    assert plan["price"]["after_per_hour"] == plan["price"]["before_per_hour"] == "0.1"  # not 6.50/h
    code, result = await _get(jp_fetch, "mode", method="PUT", body=json.dumps({"kind": "gpu"}))
    assert code == 200 and result["plan"]["warnings"] and result["price"]["after_per_hour"] == "0.1"
    code, status = await _get(jp_fetch, "mode")
    assert status["mode"]["kind"] == "gpu" and status["price_per_hour"] == "0.1"
