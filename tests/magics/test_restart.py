"""After a mode switch restarts the kernel, ``%sv`` works again without ``%load_ext``."""

from __future__ import annotations

import asyncio
from pathlib import Path

from jupyter_starverse._settings import Settings
from jupyter_starverse.modes import Mode
from jupyter_starverse.server._kernels import switch_kernel
from tests.modes.conftest import run_cell, running_kernel

GPU = Mode("gpu", "a100-80g", 1)
CPU = Mode("cpu")


def test_sv_magic_is_loaded_again_in_a_kernel_restarted_by_a_switch(tmp_path: Path) -> None:
    settings = Settings.from_env(
        {
            "STARVERSE_HOME": str(tmp_path / "home"),
            "STARVERSE_STORE": str(tmp_path / "store"),
            "STARVERSE_EXPERIMENTS": str(tmp_path / "experiments"),
            "STARVERSE_WORKSPACE": "local",
        }
    )

    async def scenario() -> None:
        async with running_kernel(tmp_path) as km:
            setup = await run_cell(km, "%load_ext jupyter_starverse\nx = 41")
            assert setup["status"] == "ok", setup["error"]
            report = await switch_kernel(km, CPU, home=settings.home, from_mode=GPU)
            assert report.error is None and report.restore is not None
            after = await run_cell(km, "print(x + 1)\nprint('sv' in get_ipython().magics_manager.magics['line'])")
            assert after["status"] == "ok", after["error"]
            assert after["stdout"].split() == ["42", "True"]

    asyncio.run(scenario())
