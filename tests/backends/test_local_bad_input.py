"""Bad input and failing scripts on the local backend: clear errors, nothing left running,
and the experiment folder says what happened."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from jupyter_starverse._settings import Settings
from jupyter_starverse.backends.local._local import LocalBackend
from jupyter_starverse.cli import main as cli_main
from jupyter_starverse.errors import BadInputError, ConflictError
from jupyter_starverse.jobmodel import JobSpec, JobState

from ._local import (
    TINY,
    _stop_leftover_jobs,  # noqa: F401 - autouse: no job outlives its test
    assert_no_processes_left,
    wait_for_step,
)


def _nothing_created(settings: Settings) -> bool:
    return not settings.experiments.exists() or not any(settings.experiments.rglob("spec.json"))


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"nodes": 0}, "nodes"),
        ({"nodes": -2}, "nodes"),
        ({"procs_per_node": "two"}, "procs_per_node"),
        ({"procs_per_node": 1000}, "procs_per_node"),
        ({"steps": 0}, "steps"),
        ({"name": ""}, "name"),
    ],
)
def test_nonsense_specs_name_the_field(changes: dict[str, object], field: str) -> None:
    with pytest.raises(BadInputError) as err:
        JobSpec(**{"name": "ok", "code": "pass", **changes})  # type: ignore[arg-type]
    assert err.value.field == field


def test_cli_rejects_nonsense_counts_with_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["launch", "--nodes", "0", "--dry-run"]) == 2
    assert "nodes" in capsys.readouterr().err


def test_syntax_error_is_refused_before_anything_starts(settings: Settings, tmp_path: Path) -> None:
    backend = LocalBackend(settings)
    with pytest.raises(BadInputError, match="syntax error on line 2") as err:
        backend.submit(JobSpec(name="bad", code="x = 1\ndef broken(:\n"))
    assert err.value.field == "script"
    script = tmp_path / "train.py"
    script.write_text("for i in range(3)\n    pass\n")
    with pytest.raises(BadInputError, match="line 1"):
        backend.submit(JobSpec(name="bad", script=str(script)))
    with pytest.raises(BadInputError, match="does not exist"):
        backend.submit(JobSpec(name="bad", script=str(tmp_path / "missing.py")))
    assert _nothing_created(settings)


def test_unknown_mount_is_bad_input(settings: Settings) -> None:
    with pytest.raises(BadInputError, match="no-such-data") as err:
        LocalBackend(settings).submit(JobSpec(name="m", code="pass", mounts=("no-such-data",)))
    assert err.value.field == "mounts"
    assert _nothing_created(settings)


def test_gpu_job_on_a_machine_without_gpus_says_how_to_run_on_cpu(settings: Settings) -> None:
    if any(Path("/dev").glob("nvidia[0-9]*")):
        pytest.skip("this machine has a GPU")
    with pytest.raises(BadInputError, match="has none") as err:
        LocalBackend(settings).submit(JobSpec(name="g", code="pass", accelerator="a100-80g"))
    assert err.value.hint and "cpu" in err.value.hint


def test_port_in_use_is_a_conflict(settings: Settings) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ConflictError, match=f"port {port}") as err:
            LocalBackend(settings, port=port).submit(JobSpec(name="p", code="pass"))
    assert err.value.hint and "free" in err.value.hint
    assert _nothing_created(settings)


@pytest.mark.slow
def test_a_name_in_use_collides_until_the_job_ends(settings: Settings) -> None:
    backend = LocalBackend(settings)
    job = backend.submit(JobSpec(name="busy", code=TINY, steps=100000, env={"STEP_SLEEP": "0.1"}))
    try:
        with pytest.raises(ConflictError, match="busy") as err:
            backend.submit(JobSpec(name="busy", code=TINY, steps=5))
        assert err.value.hint and job.id in err.value.hint
        wait_for_step(job, 1)
    finally:
        backend.cancel(job.id)
    assert_no_processes_left(job)
    assert len(backend.list()) == 1


@pytest.mark.slow
def test_a_crash_on_one_rank_fails_the_job_and_names_the_rank(settings: Settings) -> None:
    crash = TINY.replace(
        "    time.sleep(sleep)",
        "    time.sleep(sleep)\n"
        "    if step == 2 and ctx.rank == 1:\n"
        "        raise RuntimeError('bad batch on rank one')",
    )
    backend = LocalBackend(settings)
    job = backend.submit(JobSpec(name="crash", code=crash, nodes=2, steps=50, env={"STEP_SLEEP": "0.05"}))
    done = backend.wait(job.id, timeout=240)
    assert done.state is JobState.FAILED
    assert done.reason is not None
    assert "rank 1" in done.reason and "RuntimeError: bad batch on rank one" in done.reason
    error = json.loads((Path(done.experiment_dir) / "errors" / "rank1.json").read_text())
    assert "bad batch on rank one" in error["traceback"]
    assert all(n.state in (JobState.FAILED, JobState.CANCELLED) for n in done.nodes)
    assert any(n.exit_code not in (0, None) for n in done.nodes)
    assert_no_processes_left(done)


def test_a_gpu_job_on_a_machine_without_gpus_names_the_users_flags_not_internal_fields(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_starverse.backends.local import _local as local_module

    monkeypatch.setattr(local_module.Path, "glob", lambda self, pattern: iter(()))  # no /dev/nvidia*
    backend = local_module.LocalBackend(settings)
    with pytest.raises(BadInputError) as err:
        backend._check_gpu(JobSpec(name="g", script="train.py", accelerator="a100-80g"))
    text = str(err.value)
    assert "--gpu cpu" in text and "%sv mode cpu" in text and "--backend kubernetes" in text, text
    assert "JobSpec." not in text and "accelerator='cpu'" not in text, text
