"""The pod's exit code after a preemption, with a real torchrun (CPU, gloo, 2 ranks).

torchrun ends with 1 whether it got SIGTERM or its ranks stopped on one; the pod command's
``BOOT`` turns both into 143, the code the pod failure policy takes for a preemption. A rank's
real error still ends the pod with torchrun's own code.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from jupyter_starverse.backends.kubernetes._checks import BOOT
from jupyter_starverse.experiments import read_metrics

SCRIPT = """
import os, time, torch
from pathlib import Path
from jupyter_starverse import runtime as sv

ctx = sv.init()
Path(os.environ["STARVERSE_EXPERIMENT_DIR"], f"pid{ctx.rank}").write_text(str(os.getpid()))
model = sv.wrap(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in sv.steps(model=model, optimizer=opt):
    loss = model(torch.ones(2, 4)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    sv.log_metrics(step, loss=loss)
    if step == 2 and ctx.rank == 1 and os.environ.get("FAIL"):
        raise RuntimeError("boom")
    time.sleep(0.1)
"""


def _start(tmp_path: Path, *, fail: bool = False) -> tuple[subprocess.Popen[bytes], Path]:
    run = tmp_path / "run"
    run.mkdir()
    (tmp_path / "train.py").write_text(SCRIPT)
    env = {
        **os.environ,
        "STARVERSE_EXPERIMENT_DIR": str(run),
        "STARVERSE_PREEMPT_EXIT": "143",
        "STARVERSE_STOP_GRACE": "20",
        "STARVERSE_STEPS": "10000",
        "OMP_NUM_THREADS": "1",
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
        **({"FAIL": "1"} if fail else {}),
    }
    argv = [sys.executable, "-c", BOOT, "torch,jupyter_starverse", "torch.distributed.run", "--standalone",
            "--nnodes=1", "--nproc-per-node=2", "--max-restarts=0", str(tmp_path / "train.py")]  # fmt: skip
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return proc, run


def _wait_step(proc: subprocess.Popen[bytes], run: Path, step: int) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        points = read_metrics(run, from_logs=False)
        if points and points[-1].step >= step and (run / "pid1").is_file():
            return
        time.sleep(0.1)
    raise AssertionError(f"no step {step}: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}")


def _checkpointed(run: Path) -> bool:
    return any((run / "checkpoints").glob("step-*")) and any((run / "stops").glob("rank*.json"))


@pytest.mark.slow
def test_a_sigterm_to_one_rank_ends_the_pod_with_143_after_the_checkpoint(tmp_path: Path) -> None:
    proc, run = _start(tmp_path)
    _wait_step(proc, run, 2)
    os.kill(int((run / "pid1").read_text()), signal.SIGTERM)  # a provider's SIGTERM to one rank
    assert proc.wait(timeout=60) == 143  # every rank checkpointed and stopped: torchrun itself said 1
    assert any((run / "checkpoints").glob("step-*")) and any((run / "stops").glob("rank*.json"))


FAKE = """
import signal

class SignalException(Exception):
    def __init__(self, sigval):
        self.sigval = sigval

class Failure:
    def __init__(self, exitcode):
        self.exitcode = exitcode

class ChildFailedError(Exception):
    def __init__(self, codes):
        self.failures = {i: Failure(c) for i, c in enumerate(codes)}

class DistNetworkError(RuntimeError):
    pass

class RendezvousConnectionError(Exception):
    pass

import sys
what = sys.argv[1]
if what == "store-lost":  # torchrun's agent when node 0's pod (the c10d store's host) is gone
    try:
        raise DistNetworkError("Failed to recv, got 0 bytes. Connection was likely closed.")
    except DistNetworkError as e:
        raise RendezvousConnectionError("The connection to the C10d store has failed.") from e
if what == "signal":
    raise SignalException(signal.Signals.SIGTERM)
if what == "stopped":
    raise ChildFailedError([143, -15])
if what == "mixed":
    raise ChildFailedError([143, 1])
raise SystemExit(int(what))
"""


@pytest.mark.parametrize(
    ("what", "code"),
    [("signal", 143), ("stopped", 143), ("store-lost", 143), ("mixed", 1), ("0", 0), ("1", 1), ("3", 3)],
)
def test_boot_maps_what_torchrun_raised_to_the_pod_exit_code(tmp_path: Path, what: str, code: int) -> None:
    """torchrun's SignalException (it got SIGTERM) and a ChildFailedError whose ranks all stopped on
    SIGTERM are a preemption (143); a rank's real failure or any other exit passes through."""
    (tmp_path / "fake_torchrun.py").write_text(FAKE)
    argv = [sys.executable, "-c", BOOT, "json", "fake_torchrun", what]
    done = subprocess.run(argv, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path)}, capture_output=True)
    assert done.returncode == code, done.stderr.decode()[-500:]


@pytest.mark.parametrize(("seen", "code"), [("", 0), ("0", 0), ("2", 0), ("3", 86)])
def test_boot_refuses_a_node_preempted_past_the_budget(tmp_path: Path, seen: str, code: int) -> None:
    """``STARVERSE_NODE_PREEMPTIONS`` (the index's ignored-failure count, by the downward API; empty
    on a first pod) past ``STARVERSE_PREEMPT_RESTARTS``: exit 86 before anything starts."""
    env = {**os.environ, "STARVERSE_NODE_PREEMPTIONS": seen, "STARVERSE_PREEMPT_RESTARTS": "2"}
    done = subprocess.run([sys.executable, "-c", BOOT, "json", "platform"], env=env, capture_output=True, text=True)
    assert done.returncode == code, done.stderr
    assert ("no restarts left (preemption budget 2 used)" in done.stderr) == bool(code)
