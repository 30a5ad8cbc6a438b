"""REST for the mode, against a real Jupyter server with a real kernel."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from .conftest import ROOT, run_cell


async def _json(jp_fetch: Any, *path: str, **kwargs: Any) -> Any:
    response = await jp_fetch("jupyter-starverse", *path, **kwargs)
    return response.code, json.loads(response.body) if response.body else None


async def _error(jp_fetch: Any, *path: str, **kwargs: Any) -> tuple[int, Any]:
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch("jupyter-starverse", *path, **kwargs)
    assert info.value.response is not None
    return info.value.code, json.loads(info.value.response.body)


async def test_status_and_plan(jp_fetch: Any) -> None:
    code, status = await _json(jp_fetch, "mode")
    assert code == 200
    assert status["mode"] == {"kind": "cpu", "gpu_type": None, "gpus": 0}
    assert status["where"] == "local" and status["price_per_hour"] == "0.1" and status["currency"] == "CNY"
    assert "a100-80g" in status["gpu_types"] and status["saved"] == []

    code, plan = await _json(jp_fetch, "mode", "plan", params={"kind": "gpu", "gpu_type": "h100-80g", "gpus": "2"})
    assert plan["target"] == {"kind": "gpu", "gpu_type": "h100-80g", "gpus": 2}
    assert plan["price"]["difference_per_hour"] == "23.9"

    code, err = await _error(jp_fetch, "mode", "plan", params={"kind": "gpu", "gpu_type": "b300"})
    assert code == 400 and "no price for GPU type 'b300'" in err["message"] and "known types" in err["hint"]
    code, err = await _error(jp_fetch, "mode", method="PUT", body=json.dumps({"kind": "tpu"}))
    assert code == 400 and err["field"] == "mode"
    code, err = await _error(jp_fetch, "mode", method="PUT", body=json.dumps({"kind": "gpu", "gpus": "many"}))
    assert code == 400 and err["field"] == "gpus"
    code, err = await _error(jp_fetch, "mode", method="PUT", body="[1]")
    assert code == 400
    code, err = await _error(jp_fetch, "mode", "saved", "20260101-000000-deadbeef", method="DELETE")
    assert code == 404


async def test_put_switches_every_kernel_and_keeps_its_variables(jp_fetch: Any, jp_serverapp: Any) -> None:
    mkm = jp_serverapp.kernel_manager
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    kid = await mkm.start_kernel(kernel_name="python3", env=env)
    km = mkm.get_kernel(kid)
    try:
        cell = "x = 42\nnames = ['a', 'b']\nfh = open(__import__('os').devnull, 'w')"
        assert (await run_cell(km, cell))["status"] == "ok"

        body = json.dumps({"kind": "gpu", "gpu_type": "a100-80g"})
        code, result = await _json(jp_fetch, "mode", method="PUT", body=body)
        assert code == 200
        assert result["price"] == {"currency": "CNY", "before_per_hour": "0.1", "after_per_hour": "6.5",
                                   "difference_per_hour": "6.4"}
        [kernel] = result["kernels"]
        assert kernel["kernel_id"] == kid and kernel["error"] is None
        assert sorted(kernel["restore"]["restored"]) == ["names", "x"]
        assert kernel["saved"]["not_kept"]["fh"].startswith("open file handle")

        code, result = await _json(jp_fetch, "mode", method="PUT", body=json.dumps({"kind": "cpu"}))
        assert result["price"]["difference_per_hour"] == "-6.4"
        out = await run_cell(km, "import os\nprint(x, names, repr(os.environ['CUDA_VISIBLE_DEVICES']))")
        assert out["stdout"].strip() == "42 ['a', 'b'] ''"
        code, status = await _json(jp_fetch, "mode")
        assert status["mode"]["kind"] == "cpu" and status["saved"] == []
        assert sorted(status["last_restore"]["restored"]) == ["names", "x"]

        code, again = await _json(jp_fetch, "mode", method="PUT", body=json.dumps({"kind": "cpu"}))
        assert again["outcome"] is None and again["kernels"] == []  # nothing to do
    finally:
        await mkm.shutdown_kernel(kid, now=True)


async def test_kernel_restart_request_restores_a_saved_state(jp_fetch: Any, jp_serverapp: Any, tmp_path: Any) -> None:
    import asyncio

    from jupyter_starverse._settings import Settings
    from jupyter_starverse.modes import save_namespace

    mkm = jp_serverapp.kernel_manager
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    kid = await mkm.start_kernel(kernel_name="python3", env=env)
    km = mkm.get_kernel(kid)
    try:
        home = Settings.from_env().home
        state = save_namespace({"answer": 42}, home=home, kernel_id=kid)
        code, body = await _json(jp_fetch, "mode", "kernels", kid, method="POST",
                                 body=json.dumps({"state_id": state.id}))
        assert code == 202 and body["state_id"] == state.id
        for _ in range(600):  # the restart runs in the background
            if not (home / "modes" / "saved" / state.id).exists():
                break
            await asyncio.sleep(0.1)
        out = await run_cell(km, "print(answer)")
        assert out["stdout"].strip() == "42"
        body = json.dumps({"state_id": state.id})
        code, err = await _error(jp_fetch, "mode", "kernels", "nope", method="POST", body=body)
        assert code == 404 and "no running kernel" in err["message"]
    finally:
        await mkm.shutdown_kernel(kid, now=True)


async def test_magic_in_a_server_kernel_is_restarted_and_restored_by_the_server(
    jp_fetch: Any, jp_serverapp: Any, jp_runtime_dir: Any
) -> None:
    """The JupyterLab path: `%sv mode` saves, the server restarts the kernel in the new mode and restores."""
    import asyncio

    from jupyter_starverse._settings import Settings

    jp_serverapp.write_server_info_file()  # what a real server does at start: the kernel finds it
    mkm = jp_serverapp.kernel_manager
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", JUPYTER_RUNTIME_DIR=str(jp_runtime_dir))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    kid = await mkm.start_kernel(kernel_name="python3", env=env)
    km = mkm.get_kernel(kid)
    home = Settings.from_env().home
    try:
        pid = (await run_cell(km, "import os\nprint(os.getpid())"))["stdout"].strip()
        cell = (
            "%load_ext jupyter_starverse\nx = 42\n_r = %sv mode gpu --gpu l40s\n"
            "print(_r.restart_requested, _r.message)"
        )
        out = await run_cell(km, cell)
        assert out["status"] == "ok", out["error"]
        assert out["stdout"].startswith("True the kernel restarts in gpu (1 x l40s) mode now")
        for _ in range(600):  # the server waits for the cell to end, restarts and restores
            reports = list((home / "modes" / "reports").glob("*.json"))
            if reports and not any((home / "modes" / "saved").iterdir()):
                break
            await asyncio.sleep(0.1)
        out = await run_cell(km, "import os\nprint(x, os.getpid())")
        value, new_pid = out["stdout"].split()
        assert value == "42" and new_pid != pid  # the value is back, in a new kernel process

        out = await run_cell(km, "%load_ext jupyter_starverse\n_r = %sv mode cpu\nprint(_r.restart_requested)")
        assert out["stdout"].strip() == "True"
        for _ in range(600):
            if len(list((home / "modes" / "reports").glob("*.json"))) == 2 and not any(
                (home / "modes" / "saved").iterdir()
            ):
                break
            await asyncio.sleep(0.1)
        out = await run_cell(km, "import os\nprint(x, repr(os.environ['CUDA_VISIBLE_DEVICES']))")
        assert out["stdout"].strip() == "42 ''"  # restarted by the server with the GPUs hidden
    finally:
        await mkm.shutdown_kernel(kid, now=True)
        jp_serverapp.remove_server_info_file()


async def test_cli_lets_the_running_server_switch_and_keep_kernel_variables(
    jp_fetch: Any,
    jp_serverapp: Any,
    jp_runtime_dir: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`starverse mode` in a terminal: the server saves, switches and restores its kernels.

    (``jp_fetch`` makes pytest-jupyter serve HTTP on the port the server's info file names.)
    """
    import asyncio

    from jupyter_starverse.cli import main

    jp_serverapp.write_server_info_file()
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(jp_runtime_dir))
    mkm = jp_serverapp.kernel_manager
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    kid = await mkm.start_kernel(kernel_name="python3", env=env)
    km = mkm.get_kernel(kid)
    try:
        assert (await run_cell(km, "x = 42"))["status"] == "ok"
        capsys.readouterr()
        code = await asyncio.to_thread(main, ["mode", "gpu", "--gpu", "rtx4090"])
        out = capsys.readouterr().out
        assert code == 0, out
        assert "switched to gpu (1 x rtx4090) through the Jupyter server" in out and "+1.70 CNY/h" in out
        assert f"kernel {kid}: restored x" in out
        assert (await run_cell(km, "print(x)"))["stdout"].strip() == "42"

        code = await asyncio.to_thread(main, ["mode", "gpu", "--gpu", "b300"])
        err = capsys.readouterr().err
        assert code == 2 and "no price for GPU type 'b300'" in err and "(server http" in err
    finally:
        await mkm.shutdown_kernel(kid, now=True)
        jp_serverapp.remove_server_info_file()
