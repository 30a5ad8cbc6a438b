"""``starverse mode`` on the command line and ``%sv mode`` in a real kernel."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from jupyter_starverse._settings import Settings
from jupyter_starverse.cli import main
from jupyter_starverse.modes import Mode, ModeService

from .conftest import run_cell, running_kernel


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_shows_plans_and_switches(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("STARVERSE_WORKSPACE", "local")
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))  # no Jupyter server runs
    code, out, _ = _cli(capsys, "mode", "--json")
    assert code == 0 and json.loads(out)["mode"]["kind"] == "cpu"
    code, out, _ = _cli(capsys, "mode", "gpu", "--gpu", "rtx4090", "--gpus", "2", "--dry-run", "--json")
    plan = json.loads(out)
    assert plan["target"] == {"kind": "gpu", "gpu_type": "rtx4090", "gpus": 2}
    assert plan["price"]["difference_per_hour"] == "3.5"
    assert ModeService(Settings.from_env()).current() == Mode("cpu")  # dry run changed nothing

    code, out, _ = _cli(capsys, "mode", "gpu", "--gpu", "rtx4090")
    assert code == 0
    assert "switched to gpu (1 x rtx4090)" in out and "+1.70 CNY/h" in out
    assert "running kernels keep their GPUs until they restart" in out
    assert ModeService(Settings.from_env()).current() == Mode("gpu", "rtx4090", 1)

    code, out, err = _cli(capsys, "mode", "gpu", "--gpu", "b300")
    assert code == 2 and "no price for GPU type 'b300'" in err
    code, out, err = _cli(capsys, "mode", "restore")
    assert code == 2 and "%sv mode restore" in err
    code, out, err = _cli(capsys, "mode", "discard")
    assert code == 2 and "which saved state" in err
    code, out, err = _cli(capsys, "mode", "discard", "20260101-000000-deadbeef")
    assert code == 3 and "no saved state" in err
    code, out, err = _cli(capsys, "mode", "--widget")
    assert code == 2 and "%sv mode --widget" in err
    code, out, err = _cli(capsys, "mode", "gpu", "--gpus", "0")
    assert code == 2 and "at least 1" in err


def test_magic_saves_switches_and_restores_after_a_restart(tmp_path: Path) -> None:
    home = tmp_path / "sv"
    setup = (
        "import os\n"
        f"os.environ['STARVERSE_HOME'] = {str(home)!r}\n"
        "os.environ['STARVERSE_WORKSPACE'] = 'local'\n"
        "os.environ['STARVERSE_MODE'] = 'gpu'\n"
        "%load_ext jupyter_starverse\n"
        "x = 42\n"
        "log = open('run.log', 'w')\n"
    )

    async def scenario() -> None:
        async with running_kernel(tmp_path) as km:
            assert (await run_cell(km, setup))["status"] == "ok"
            out = await run_cell(km, "_r = %sv mode cpu\nprint(_r)")
            assert out["status"] == "ok", out["error"]
            text = out["stdout"]
            assert "switched to cpu (local)" in text and "-6.40 CNY/h" in text
            assert "saved 1 name(s): x" in text
            assert "log: open file handle" in text
            assert "restart the kernel now" in text  # no Jupyter server runs this kernel
            state_id = text.split("`%sv mode restore ")[1].split("`")[0]

            await km.restart_kernel(now=True)
            restore = (
                "import os\n"
                f"os.environ['STARVERSE_HOME'] = {str(home)!r}\n"
                "%load_ext jupyter_starverse\n"
                f"_r = %sv mode restore {state_id}\n"
                "print(_r)\n"
                "print(x, repr(os.environ['CUDA_VISIBLE_DEVICES']))\n"
            )
            out = await run_cell(km, restore)
            assert out["status"] == "ok", out["error"]
            lines = out["stdout"].strip().splitlines()
            assert lines[0] == "restored 1 name(s): x"
            assert "log: open file handle" in out["stdout"]
            assert lines[-1] == "42 ''"  # value back, GPUs hidden for CPU mode

            out = await run_cell(km, "_w = %sv mode --widget\nprint(type(_w).__name__, _w.kind.value)")
            assert out["stdout"].strip() == "ModeToggle cpu"
            out = await run_cell(km, "%sv mode restore")
            assert out["status"] == "error" and "no saved kernel state" in str(out["error"])

    asyncio.run(scenario())
    assert os.environ.get("STARVERSE_HOME") != str(home)
