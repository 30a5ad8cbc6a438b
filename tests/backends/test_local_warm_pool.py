"""Warm worker pool: a cold 2 x 2 job starts the pool, the next ones fork their ranks from it.

One cold job (it starts the pool once its ranks run), then warm jobs of a few seconds each: the
ranks see what a torchrun rank sees, SIGTERM still checkpoints, a failing rank still fails the
job, and a request whose interpreter environment differs is refused by the pool.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from jupyter_starverse._procs import pid_alive
from jupyter_starverse._settings import Settings
from jupyter_starverse.backends.local import _pool
from jupyter_starverse.backends.local._local import LocalBackend
from jupyter_starverse.experiments import latest_checkpoint
from jupyter_starverse.jobmodel import JobSpec, JobState

from ._local import (
    _stop_leftover_jobs,  # noqa: F401 - autouse: no job outlives its test
    assert_no_processes_left,
    wait_for,
    wait_for_step,
)

pytestmark = pytest.mark.slow

# Each rank records what it was started with, then trains a few steps with the runtime.
PROBE = """
import json, os, signal, sys, time, torch
from pathlib import Path
from jupyter_starverse import runtime as sv

seen = dict(
    argv=sys.argv[1:], cwd=os.getcwd(), pid=os.getpid(), ppid=os.getppid(),
    sigterm_default=signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
    sigint_python=signal.getsignal(signal.SIGINT) is signal.default_int_handler,
    threads=torch.get_num_threads(), umask=os.umask(0o077),
    env={k: v for k, v in os.environ.items() if k.startswith(("RANK", "LOCAL_", "WORLD_", "GROUP_", "MASTER_",
         "STARVERSE_JOB_ID", "STARVERSE_NODE_INDEX", "OMP_NUM_THREADS", "STARVERSE_POOL", "MY_VAR"))},
    proc_environ=dict(x.split("=", 1) for x in Path("/proc/self/environ").read_bytes().decode().split(chr(0))
                      if "=" in x),
)
agent = seen["ppid"]
seen["agent_parent"] = int(Path(f"/proc/{agent}/stat").read_text().rsplit(")", 1)[1].split()[1])
run = Path(os.environ["STARVERSE_EXPERIMENT_DIR"])
(run / f"seen{os.environ['RANK']}.json").write_text(json.dumps(seen))
ctx = sv.init()
model = sv.wrap(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.ones(8, 4)
for step in sv.steps(model=model, optimizer=opt):
    loss = model(x).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    sv.log_metrics(step, loss=loss)
    if step == 1 and ctx.rank == int(os.environ.get("FAIL_RANK", "-1")):
        raise SystemExit(3)
    time.sleep(float(os.environ.get("STEP_SLEEP", "0")))
"""


def _seen(job_dir: str, rank: int) -> dict[str, object]:
    data = json.loads((Path(job_dir) / f"seen{rank}.json").read_text())
    assert isinstance(data, dict)
    return data


def _supervisor_log(job_dir: str) -> str:
    return (Path(job_dir) / "supervisor.log").read_text()


def _spec(name: str, **kw: object) -> JobSpec:
    return JobSpec(name=name, code=PROBE, nodes=2, procs_per_node=2, args=["--flag", "x"],
                   env={"MY_VAR": "1", **kw.pop("env", {})}, **kw)  # type: ignore[arg-type]  # fmt: skip


def test_a_cold_job_warms_a_pool_and_the_next_jobs_start_from_it(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STARVERSE_WARM_POOL", "auto")
    monkeypatch.setenv("STARVERSE_POOL_IDLE_MINUTES", "2")
    settings = Settings.from_env()
    backend = LocalBackend(settings)
    try:
        # 1. no pool yet: a cold start, as before, and the pool is started once the ranks run
        cold = backend.wait(backend.submit(_spec("cold", steps=3)).id, timeout=300)
        assert cold.state is JobState.SUCCEEDED, cold.reason
        assert "cold start (no warm pool runs" in _supervisor_log(cold.experiment_dir)
        wait_for(lambda: any(p.ready for p in backend.pools()), timeout=180, why="the warm pool to be ready")
        (pool,) = backend.pools()
        assert pool.python and pid_alive(pool.pid)

        # 2. the same interpreter and environment: every rank is forked from the pool
        warm = backend.wait(backend.submit(_spec("warm", steps=3)).id, timeout=120)
        assert warm.state is JobState.SUCCEEDED, warm.reason
        assert f"warm start from pool {pool.fingerprint}" in _supervisor_log(warm.experiment_dir)
        assert [n.state for n in warm.nodes] == [JobState.SUCCEEDED] * 2
        for rank in range(4):
            c, w = _seen(cold.experiment_dir, rank), _seen(warm.experiment_dir, rank)
            assert w["agent_parent"] == pool.pid  # rank -> node agent -> pool
            assert c["agent_parent"] != pool.pid
            assert isinstance(w["env"], dict) and isinstance(c["env"], dict)
            # what the rank sees is what a torchrun rank sees (but the job id and the ports)
            assert set(w["env"]) == set(c["env"]), set(w["env"]) ^ set(c["env"])
            for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "OMP_NUM_THREADS",
                        "STARVERSE_NODE_INDEX", "MY_VAR"):  # fmt: skip
                assert w["env"].get(key) == c["env"].get(key), key
            assert w["env"]["STARVERSE_JOB_ID"] == warm.id
            for key in ("argv", "sigterm_default", "sigint_python", "threads", "umask"):
                assert w[key] == c[key], key
            assert Path(str(w["cwd"])).resolve() == Path(warm.experiment_dir).resolve()
            assert Path(str(c["cwd"])).resolve() == Path(cold.experiment_dir).resolve()
            # tools that find a job's processes by their environment find the warm ones too
            assert isinstance(w["proc_environ"], dict)
            assert w["proc_environ"]["STARVERSE_JOB_ID"] == warm.id
            assert w["proc_environ"]["STARVERSE_NODE_INDEX"] == str(rank // 2)
        logs = (Path(warm.experiment_dir) / "logs" / "rank3.log").read_text()
        assert "Traceback" not in logs
        assert_no_processes_left(warm)

        # 3. SIGTERM (cancel) still checkpoints and stops every warm process
        job = backend.submit(_spec("warm-cancel", steps=10_000, checkpoint_every=1000, env={"STEP_SLEEP": "0.05"}))
        wait_for_step(job, 2, timeout=120)
        stopped = backend.cancel(job.id, timeout=60)
        assert stopped.state is JobState.CANCELLED, stopped.reason
        assert f"warm start from pool {pool.fingerprint}" in _supervisor_log(stopped.experiment_dir)
        ckpt = latest_checkpoint(Path(stopped.experiment_dir))
        assert ckpt is not None and ckpt.step >= 2 and ckpt.world_size == 4
        assert_no_processes_left(stopped)

        # 4. a failing rank fails its node and the job, with the rank's exit recorded
        failed = backend.wait(backend.submit(_spec("warm-fail", steps=5, env={"FAIL_RANK": "3"})).id, timeout=120)
        assert failed.state is JobState.FAILED
        assert "SystemExit: 3" in (failed.reason or ""), failed.reason
        assert json.loads((Path(failed.experiment_dir) / "errors" / "rank3.json").read_text())["error"] == (
            "SystemExit: 3"
        )
        assert_no_processes_left(failed)

        # 5. another interpreter environment never runs in this pool: it refuses the request
        env = {**os.environ, "PYTHONHASHSEED": "7"}
        with pytest.raises(_pool.PoolUnavailable, match="not this pool's"):
            _pool.start_node(_pool.socket_name(settings.home, pool.fingerprint), {"python": sys.executable,
                             "env": env}, [1])  # fmt: skip
        assert _pool.fingerprint(sys.executable, env) != _pool.fingerprint(sys.executable, dict(os.environ))
    finally:
        stopped_pools = backend.stop_pools()
        for p in stopped_pools:
            wait_for(lambda p=p: not pid_alive(p.pid), timeout=30, why="the pool to exit")  # type: ignore[misc]


def test_fingerprint_tracks_what_shapes_an_interpreter_and_nothing_else() -> None:
    base = {"PATH": "/bin", "PYTHONPATH": "/a", "OMP_NUM_THREADS": "1", "STARVERSE_JOB_ID": "j1"}
    fp = _pool.fingerprint(sys.executable, base)
    assert _pool.fingerprint(sys.executable, {**base, "STARVERSE_JOB_ID": "j2", "OMP_NUM_THREADS": "4"}) == fp
    for key, value in (("PYTHONPATH", "/b"), ("STARVERSE_ENV", "e1"), ("LD_PRELOAD", "x.so"), ("MKL_DEBUG", "1"),
                       ("TORCH_LOGS", "+dynamo"), ("VIRTUAL_ENV", "/v")):  # fmt: skip
        assert _pool.fingerprint(sys.executable, {**base, key: value}) != fp, key
    assert _pool.fingerprint("/usr/bin/python3-other", base) != fp
    env = _pool.pool_env({**base, "STARVERSE_NODE_INDEX": "0", "MY_SECRET": "s"}, Path("/h"))
    assert "STARVERSE_JOB_ID" not in env and "STARVERSE_NODE_INDEX" not in env and "MY_SECRET" not in env
    assert env["PYTHONPATH"] == "/a" and env["STARVERSE_HOME"] == "/h"
    assert _pool.fingerprint(sys.executable, env) == fp  # the pool started for a job serves that job


def test_no_pool_for_another_user(monkeypatch: pytest.MonkeyPatch) -> None:
    """The supervisor hands a job only to a pool of its own uid (SO_PEERCRED)."""
    import socket as socketlib

    name = f"\0starverse-test-{os.getpid()}"
    server = socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_STREAM)
    server.bind(name)
    server.listen(1)
    try:
        monkeypatch.setattr(_pool, "peer_uid", lambda _s: os.geteuid() + 1)
        with pytest.raises(_pool.PoolUnavailable, match="another user"):
            _pool.start_node(name, {}, [1])
    finally:
        server.close()
