"""The sbatch script and the Slurm plumbing, without a cluster: every script passes ``bash -n``."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from jupyter_starverse._settings import Settings
from jupyter_starverse.backends import BACKENDS, make_backend
from jupyter_starverse.backends.slurm import SlurmBackend, SlurmLaunch, render_script
from jupyter_starverse.backends.slurm._commands import (
    expand_hostlist,
    job_state,
    parse_fields,
    submit_error,
)
from jupyter_starverse.errors import BackendUnavailableError, BadInputError, PermissionDeniedError
from jupyter_starverse.jobmodel import JobSpec, JobState

from ._jobs import TINY


def _bash_n(text: str) -> None:
    done = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True)
    assert done.returncode == 0, done.stderr + text


def _directives(text: str) -> list[str]:
    return [line.split("#", 2)[1].split()[1] for line in text.splitlines() if line.startswith("#SBATCH ")]


def test_slurm_is_a_registered_backend(settings: Settings) -> None:
    assert "slurm" in BACKENDS and isinstance(make_backend("slurm", settings), SlurmBackend)


def test_cpu_script_has_the_topology_requeue_and_no_gpus(settings: Settings) -> None:
    spec = JobSpec(name="cpu", code=TINY, nodes=2, procs_per_node=3, steps=5, env={"A": "it's $HOME `x`\nnext"})
    text = SlurmBackend(settings).render(spec)
    _bash_n(text)
    flags = _directives(text)
    assert "--nodes=2" in flags and "--ntasks-per-node=3" in flags  # a task per rank, no agent
    assert "--requeue" in flags and "--signal=B:TERM@120" in flags and "--open-mode=append" in flags
    assert not any(f.startswith(("--gpus", "--gres", "--partition", "--account", "--qos", "--time")) for f in flags)
    assert "torch.distributed.run" not in text and "srun --kill-on-bad-exit=1 --ntasks-per-node=3" in text
    assert 'export MASTER_ADDR="$head" MASTER_PORT="$port"' in text and "WORLD_SIZE=6 LOCAL_WORLD_SIZE=3" in text
    assert '"$PYTHON" -m jupyter_starverse.backends.slurm._rank' in text
    assert "export A='it'\"'\"'s $HOME `x`\nnext'" in text  # quoted: no expansion, no command
    assert f"{settings.experiments}/cpu/runs/'\"$STARVERSE_JOB_ID\"'/logs/node%n.log" in text


def test_gpu_script_asks_for_gpus_in_the_mapped_partition_with_account_qos_and_time(settings: Settings) -> None:
    s = settings.replace(
        slurm_partitions=(("a100-80g", "gpu-a100"), ("cpu", "debug")),
        slurm_account="ml-team",
        slurm_qos="high",
        slurm_time="2-00:00:00",
    )
    spec = JobSpec(name="big", code=TINY, nodes=4, procs_per_node=8, accelerator="a100-80g", memory="512Gi", cpu="64")
    text = SlurmBackend(s).render(spec)
    _bash_n(text)
    flags = _directives(text)
    for flag in (
        "--partition=gpu-a100",
        "--gpus-per-node=8",
        "--account=ml-team",
        "--qos=high",
        "--time=2-00:00:00",
        "--mem=512G",
        "--cpus-per-task=8",  # 64 per node over its 8 ranks
    ):
        assert flag in flags, (flag, flags)
    gres = SlurmBackend(s.replace(slurm_gpu_flag="gres")).render(spec)
    assert "--gres=gpu:8" in _directives(gres) and not any(f.startswith("--gpus") for f in _directives(gres))
    cpu = SlurmBackend(s).render(spec.replace(accelerator="cpu", procs_per_node=1))
    assert "--partition=debug" in _directives(cpu)
    assert not any(f.startswith(("--gpus", "--gres")) for f in _directives(cpu))
    with pytest.raises(BadInputError) as err:
        SlurmBackend(s).render(spec.replace(accelerator="h100"))
    assert "STARVERSE_SLURM_PARTITIONS" in (err.value.hint or "") and err.value.field == "accelerator"


def test_secrets_are_named_never_valued(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_s3cr3t_value")
    spec = JobSpec(name="sec", code=TINY, secrets={"HF_TOKEN": "hf/token"})
    text = SlurmBackend(settings).render(spec)
    _bash_n(text)
    assert "hf_s3cr3t_value" not in text
    assert ': "${HF_TOKEN:?secret HF_TOKEN must be set' in text and "--export=ALL" in _directives(text)
    monkeypatch.delenv("HF_TOKEN")
    SlurmBackend(settings).render(spec)  # a preview needs no secret
    with pytest.raises(BadInputError, match="HF_TOKEN is not set"):
        SlurmBackend(settings).submit(spec)


def test_mounts_commands_resume_and_odd_paths_all_pass_bash_n(settings: Settings, tmp_path: Path) -> None:
    spec = JobSpec(name="cmd", command=("megatron", "--arg", "a b"), nodes=2, max_restarts=2, resume=True)
    weird = str(tmp_path / "run.1")
    launch = SlurmLaunch(
        job_id="cmd-1",
        spec=spec,
        run_dir=weird,
        python="/opt/py env/bin/python",
        entry=("-m", "jupyter_starverse.backends.slurm._rank", "--exec", "megatron", "--arg", "a b"),
        env={"STARVERSE_MOUNTS": json.dumps({"wiki": "/store/wiki v1"})},
        mounts={"wiki": "/store/wiki v1", "llama": "/store/hub/llama"},
        resume_from="/x/checkpoints/step-00000010",
    )
    text = render_script(launch)
    _bash_n(text)
    assert "for path in /store/hub/llama '/store/wiki v1'; do" in text
    # no agent restarts ranks (a retried group cannot rejoin); the batch script requeues, up to the budgets
    assert "--max-restarts" not in text and "'a b'" in text
    assert "requeued 2 time(s) (max_restarts)" in text and f"_requeue end {weird} " in text
    assert text.rstrip().endswith('exit "$rc"') and "scontrol requeue" in text
    for output in ("sbatch", "yaml", "json"):
        rendered = SlurmBackend(settings).render(spec, output=output)
        script = (
            rendered
            if output == "sbatch"
            else (yaml.safe_load(rendered) if output == "yaml" else json.loads(rendered))["script"]
        )
        _bash_n(script)
    data = json.loads(SlurmBackend(settings).render(spec, output="json"))
    assert data["backend"] == "slurm" and data["resume"]["checkpoint"] is None
    with pytest.raises(BadInputError):
        SlurmBackend(settings).render(spec, output="xml")


def test_sbatch_directive_values_with_spaces_are_refused(settings: Settings) -> None:
    launch = SlurmLaunch(
        job_id="j", spec=JobSpec(name="j", code="pass"), run_dir="/runs/a b", python="python", entry=()
    )
    with pytest.raises(BadInputError, match="spaces, quotes"):
        render_script(launch)
    with pytest.raises(BadInputError):
        render_script(SlurmLaunch(job_id="j", spec=launch.spec, run_dir="/runs/it's", python="python", entry=()))


def test_no_sbatch_on_path_says_how_to_install(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BackendUnavailableError) as err:
        SlurmBackend(settings).submit(JobSpec(name="nosb", code=TINY))
    assert "sbatch" in err.value.message and "apt-get install" in (err.value.hint or "")
    assert not list(Path(settings.experiments).glob("nosb/runs/*"))


@pytest.mark.parametrize(
    ("stderr", "kind", "words"),
    [
        (
            "sbatch: error: invalid partition specified: gpu\n"
            "sbatch: error: Batch job submission failed: Invalid partition name specified",
            BadInputError,
            "STARVERSE_SLURM_PARTITIONS",
        ),
        (
            "sbatch: error: Batch job submission failed: Invalid qos specification",
            PermissionDeniedError,
            "STARVERSE_SLURM_QOS",
        ),
        (
            "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified",
            PermissionDeniedError,
            "STARVERSE_SLURM_ACCOUNT",
        ),
        (
            "sbatch: error: Batch job submission failed: Job violates accounting/QOS policy "
            "(job submit limit, user's size and/or time limits)",
            PermissionDeniedError,
            "sacctmgr",
        ),
        (
            "sbatch: error: Batch job submission failed: Node count specification invalid",
            BadInputError,
            "fewer nodes",
        ),
        (
            "sbatch: error: Batch job submission failed: More processors requested than permitted",
            BadInputError,
            "fewer nodes",
        ),
        ("sbatch: error: Invalid generic resource (gres) specification", BadInputError, "STARVERSE_SLURM_GPU_FLAG"),
        (
            "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)",
            BackendUnavailableError,
            "scontrol ping",
        ),
    ],
)
def test_sbatch_refusals_become_errors_that_name_the_fix(stderr: str, kind: type, words: str) -> None:
    err = submit_error(stderr, partition="gpu", account="acct", qos="gold", nodes=9)
    assert type(err) is kind, err
    assert words in (err.hint or "")


def test_parsers() -> None:
    assert expand_hostlist("n[1-2,5],gpu[007-008]x,login") == ("n1", "n2", "n5", "gpu007x", "gpu008x", "login")
    assert expand_hostlist("(null)") == ()
    f = parse_fields(
        "JobId=5 JobName=a b JobState=PENDING Reason=BeginTime Command=/x/job.sbatch NtasksPerN:B:S:C=1:0:*:*"
    )
    assert f["JobName"] == "a b" and f["Reason"] == "BeginTime" and f["NtasksPerN:B:S:C"] == "1:0:*:*"
    assert job_state("COMPLETED") is JobState.SUCCEEDED and job_state("CANCELLED by 0") is JobState.CANCELLED
    assert job_state("TIMEOUT") is JobState.FAILED and job_state("REQUEUED") is JobState.PENDING
    assert job_state("NODE_FAIL", requeue=True) is JobState.PREEMPTED and job_state("NODE_FAIL") is JobState.FAILED
    assert job_state("PREEMPTED", requeue=True) is JobState.PREEMPTED


def test_slurm_settings_from_the_environment() -> None:
    env = {
        "STARVERSE_HOME": "/tmp/x",
        "STARVERSE_BACKEND": "slurm",
        "STARVERSE_SLURM_PARTITIONS": "cpu=debug, A100-80G=gpu-a100",
        "STARVERSE_SLURM_TIME": "1-12:00",
        "STARVERSE_SLURM_GPU_FLAG": "gres",
    }
    s = Settings.from_env(env)
    assert s.backend == "slurm" and dict(s.slurm_partitions) == {"cpu": "debug", "a100-80g": "gpu-a100"}
    assert s.slurm_time == "1-12:00" and s.slurm_gpu_flag == "gres"
    assert Settings.from_env({**os.environ, **s.to_env()}).slurm_partitions == s.slurm_partitions
    for bad in ({"STARVERSE_SLURM_TIME": "soon"}, {"STARVERSE_SLURM_PARTITIONS": "cpu=a b"}):
        with pytest.raises(BadInputError):
            Settings.from_env({**env, **bad})


def test_cpus_and_memory_per_node_from_the_gpu_type_and_rank_count_overridable(settings: Settings) -> None:
    backend = SlurmBackend(settings)
    gpu = JobSpec(name="g", code=TINY, nodes=2, procs_per_node=8, accelerator="rtx4090")
    flags = _directives(backend.render(gpu))
    # per rank (a task each): 6 CPUs + 28 GiB per 4090, a 64 / 256 GiB host's share; memory per node
    assert "--cpus-per-task=6" in flags and "--ntasks-per-node=8" in flags and "--mem=224G" in flags
    flags = _directives(backend.render(gpu.replace(accelerator="a100-80g", procs_per_node=4)))
    assert "--cpus-per-task=10" in flags and "--mem=480G" in flags  # the same share a Kubernetes pod asks
    cpu = _directives(backend.render(JobSpec(name="c", code=TINY, procs_per_node=8)))
    assert "--cpus-per-task=1" in cpu and not any(f.startswith("--mem") for f in cpu)  # 8 ranks, 8 cores
    mine = _directives(backend.render(gpu.replace(cpu="20", memory="200Gi")))
    assert "--cpus-per-task=3" in mine and "--mem=200G" in mine  # 20 per node over 8 ranks, rounded up
    with pytest.raises(BadInputError, match="not a CPU count"):
        backend.render(gpu.replace(cpu="lots"))


@pytest.mark.parametrize("limit", ["3", "00:02:30", "2:00"])
def test_a_time_limit_too_short_for_a_first_checkpoint_is_refused_with_the_figures(
    settings: Settings, limit: str
) -> None:
    backend = SlurmBackend(settings.replace(slurm_time=limit))
    spec = JobSpec(name="short", code=TINY, steps=1000, checkpoint_every=100)
    with pytest.raises(BadInputError) as err:
        backend.render(spec)
    assert "too short to reach a first checkpoint" in err.value.message and "start-up ~90 s" in err.value.message
    assert "STARVERSE_SLURM_TIME" in (err.value.hint or "") and "--checkpoint-every" in (err.value.hint or "")


def test_the_early_warning_lands_after_start_up_and_a_checkpoint_interval(settings: Settings) -> None:
    from jupyter_starverse.backends.slurm._resources import START_UP_S, check_time_limit, parse_slurm_time

    spec = JobSpec(name="ok", code=TINY, steps=1000, checkpoint_every=100)
    for limit, margin in (("4", 60), ("10", 120), ("1-00:00:00", 120), ("01:30:00", 120)):
        text = SlurmBackend(settings.replace(slurm_time=limit)).render(spec)
        assert f"--signal=B:TERM@{margin}" in _directives(text)
        seconds = parse_slurm_time(limit)
        assert seconds is not None and seconds - margin >= START_UP_S + 60
    # a known step time (the experiment's last run): 100 steps x 2 s do not fit before the warning of 5 minutes
    with pytest.raises(BadInputError, match=r"100 steps x 2.00 s"):
        check_time_limit(spec, "5", step_s=2.0)
    assert check_time_limit(spec, "10", step_s=2.0) is not None and check_time_limit(spec, None) is None
    assert parse_slurm_time("2-03") == 2 * 86400 + 3 * 3600 and parse_slurm_time("90:30") == 5430


def test_spot_runs_on_the_clusters_preemptible_qos_or_partition(settings: Settings) -> None:
    spec = JobSpec(name="s", code=TINY, accelerator="a100-80g", procs_per_node=2)
    base = settings.replace(slurm_partitions=(("a100-80g", "gpu"),), slurm_qos="normal")
    on_demand = SlurmBackend(base).render(spec)
    with pytest.raises(BadInputError, match="preemptible QOS or partition") as err:
        SlurmBackend(base).render(spec.replace(billing="spot"))
    assert "STARVERSE_SLURM_SPOT_QOS" in (err.value.hint or "")
    spot = SlurmBackend(base.replace(slurm_spot_qos="preempt")).render(spec.replace(billing="spot"))
    assert "--qos=preempt" in _directives(spot) and "--partition=gpu" in _directives(spot)
    assert "--qos=normal" in _directives(on_demand) and spot != on_demand
    part = SlurmBackend(base.replace(slurm_spot_partition="gpu-spot")).render(spec.replace(billing="spot"))
    assert "--partition=gpu-spot" in _directives(part) and "--qos=normal" in _directives(part)


def test_each_rank_takes_torchruns_variables_from_its_slurm_task() -> None:
    from jupyter_starverse.backends.slurm._rank import rank_env

    task = {"SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NODEID": "2", "WORLD_SIZE": "6", "LOCAL_WORLD_SIZE": "2"}
    env = rank_env(task)
    assert (env["RANK"], env["LOCAL_RANK"], env["GROUP_RANK"], env["STARVERSE_NODE_INDEX"]) == ("5", "1", "2", "2")
    assert env["ROLE_WORLD_SIZE"] == "6" and env["OMP_NUM_THREADS"] == "1"  # as torchrun: 2 ranks a node
    assert "OMP_NUM_THREADS" not in rank_env({**task, "OMP_NUM_THREADS": "4"})
