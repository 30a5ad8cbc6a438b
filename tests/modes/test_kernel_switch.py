"""Switching a real kernel: variables survive, the environment changes, faults lose nothing."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from jupyter_starverse._settings import Settings
from jupyter_starverse.errors import ConflictError
from jupyter_starverse.modes import Mode
from jupyter_starverse.modes._kernelstate import list_states
from jupyter_starverse.server._kernels import restart_kernel, restore_kernel, save_kernel, switch_kernel

from .conftest import run_cell, running_kernel

GPU = Mode("gpu", "a100-80g", 1)
CPU = Mode("cpu")

SETUP = """
import torch
torch.manual_seed(0)
x = 42
t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(5):
    loss = model(t).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
fh = open("notes.txt", "w")
square = lambda v: v * v
"""

FINGERPRINT = """
import json, os, torch
print(json.dumps({
    "x": x,
    "t": t.tolist(),
    "weights": [p.tolist() for p in model.parameters()],
    "prediction": model(t).tolist(),
    "loss": round(float(loss), 6),
    "cuda_visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
    "names": sorted(n for n in ("fh", "square") if n in globals()),
}))
"""


def _values(fingerprint: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in fingerprint.items() if k not in ("cuda_visible", "names")}


async def _fingerprint(km: object) -> dict[str, object]:
    result = await run_cell(km, FINGERPRINT)
    assert result["status"] == "ok", result["error"]
    data: dict[str, object] = json.loads(str(result["stdout"]).strip().splitlines()[-1])
    return data


def test_switch_to_cpu_and_back_keeps_the_work(settings: Settings, tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_kernel(tmp_path) as km:
            assert (await run_cell(km, SETUP))["status"] == "ok"
            before = await _fingerprint(km)
            assert before["cuda_visible"] is None

            to_cpu = await switch_kernel(km, CPU, home=settings.home, from_mode=GPU)
            assert to_cpu.error is None
            assert to_cpu.restore is not None
            assert set(to_cpu.restore.restored) == {"x", "t", "model", "opt", "loss"}
            assert to_cpu.restore.failed == {}
            assert set(to_cpu.saved.not_kept) == {"fh", "square", "torch", "json", "os"}  # none of IPython's own
            assert to_cpu.saved.not_kept["fh"].startswith("open file handle")
            assert to_cpu.saved.not_kept["square"].startswith("lambda")
            assert to_cpu.saved.not_kept["torch"].startswith("module")
            assert "detached" in to_cpu.saved.notes["loss"]
            on_cpu = await _fingerprint(km)
            assert on_cpu["cuda_visible"] == ""  # the new kernel sees no GPU
            assert on_cpu["names"] == []  # the file handle and the lambda are really gone
            assert _values(on_cpu) == _values(before)

            to_gpu = await switch_kernel(km, GPU, home=settings.home, from_mode=CPU)
            assert to_gpu.error is None and to_gpu.restore is not None
            back = await _fingerprint(km)
            assert _values(back) == _values(before)
            assert back["cuda_visible"] is None  # CUDA_VISIBLE_DEVICES unset again
            assert list_states(settings.home) == []  # restored states are removed from disk

    asyncio.run(scenario())


def test_kernel_dying_during_restore_loses_nothing(settings: Settings, tmp_path: Path) -> None:
    poison = (
        "import os\n"
        "class Bomb:\n"
        "    def __reduce__(self):\n"
        "        return (os._exit, (3,))\n"
        "bomb = Bomb()\n"
        "x = 42\n"
        "del Bomb\n"
    )

    async def scenario() -> None:
        async with running_kernel(tmp_path) as km:
            assert (await run_cell(km, poison))["status"] == "ok"
            saved = await save_kernel(km, home=settings.home, from_mode=GPU, to_mode=CPU)
            assert set(saved.names) == {"bomb", "x"}
            await restart_kernel(km, CPU)
            with pytest.raises(ConflictError, match="died while its variables were restored") as err:
                await restore_kernel(km, saved, home=settings.home, timeout=60)
            assert saved.path in str(err.value)
            assert Path(saved.path, "manifest.json").is_file()  # still on disk
            assert [s.id for s in list_states(settings.home)] == [saved.id]

            # Nothing lost: in a fresh kernel the user restores everything but the culprit.
            await km.restart_kernel(now=True)
            report = await restore_kernel(km, saved, home=settings.home, skip=("bomb",))
            assert report.restored == ("x",)
            assert report.failed == {"bomb": "skipped on request"}
            result = await run_cell(km, "print(x)")
            assert result["stdout"].strip() == "42"
            assert list_states(settings.home) == []

    asyncio.run(scenario())


def test_busy_kernel_is_not_switched(settings: Settings, tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_kernel(tmp_path) as km:
            kc = km.client()
            kc.start_channels()
            await kc.wait_for_ready(timeout=60)
            kc.execute("import time; y = 1; time.sleep(30)")
            with pytest.raises(ConflictError, match="could not save the variables") as err:
                await save_kernel(km, home=settings.home, from_mode=GPU, to_mode=CPU, timeout=2)
            assert "nothing was switched" in str(err.value)
            kc.stop_channels()

    asyncio.run(scenario())
