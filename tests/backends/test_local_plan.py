"""What the local backend would start: torchrun argv, job environment, templates, dry runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from jupyter_starverse._settings import Settings
from jupyter_starverse.backends._torchrun import job_env, make_local_plan, torchrun_argv
from jupyter_starverse.backends.local._local import LocalBackend
from jupyter_starverse.backends.templates import (
    check_template,
    deepspeed_config,
    example_script,
    framework_args,
    megatron_args,
)
from jupyter_starverse.errors import BadInputError
from jupyter_starverse.jobmodel import JobSpec


def test_torchrun_argv_is_an_argv_list_with_c10d_on_loopback() -> None:
    argv = torchrun_argv(
        nnodes=2,
        nproc_per_node=3,
        rdzv_endpoint="127.0.0.1:2900",
        run_id="j",
        entry=["x.py", "--lr", "1; rm -rf /"],
        max_restarts=2,
        local_addr="127.0.0.1",
        rdzv_conf={"is_host": "false"},
    )
    assert argv[1:3] == ["-m", "torch.distributed.run"]
    for flag in (
        "--nnodes=2",
        "--nproc-per-node=3",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=127.0.0.1:2900",
        "--max-restarts=2",
        "--local-addr=127.0.0.1",
        "--rdzv-conf=is_host=false",
    ):
        assert flag in argv
    assert argv[-3:] == ["x.py", "--lr", "1; rm -rf /"]  # user text stays one argument, never a shell string


def test_job_env_has_everything_a_process_needs() -> None:
    spec = JobSpec(name="t", script="x.py", steps=50, checkpoint_every=10, env={"MY_FLAG": "1"})
    env = job_env(
        spec,
        job_id="t-1",
        run_dir="/r",
        checkpoint_dir="/r/checkpoints",
        store="/s",
        hf_cache="/s/hf",
        mounts={"data": "/s/data/1"},
    )
    assert env["STARVERSE_EXPERIMENT_DIR"] == "/r"
    assert env["STARVERSE_STORE"] == "/s"
    assert env["HF_HUB_CACHE"] == "/s/hf" and env["HF_HUB_OFFLINE"] == "1"
    assert env["TENSORBOARD_LOGDIR"] == "/r/tensorboard" and env["WANDB_DIR"] == "/r"
    assert env["STARVERSE_STEPS"] == "50" and env["STARVERSE_CHECKPOINT_EVERY"] == "10"
    assert json.loads(env["STARVERSE_MOUNTS"]) == {"data": "/s/data/1"}
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1" and env["OMP_NUM_THREADS"] == "1"
    assert env["MY_FLAG"] == "1"
    plan = make_local_plan(spec.replace(nodes=2), job_id="t-1", port=2900, env=env, entry=["x.py"])
    assert [n.env["STARVERSE_NODE_INDEX"] for n in plan.nodes] == ["0", "1"]
    assert all("--rdzv-endpoint=127.0.0.1:2900" in n.argv for n in plan.nodes)


def test_dry_run_renders_every_node_and_starts_nothing(settings: Settings) -> None:
    backend = LocalBackend(settings)
    spec = JobSpec(name="dry", script=str(example_script("ddp")), nodes=2, procs_per_node=2, steps=5)
    data = yaml.safe_load(backend.render(spec, output="yaml"))
    assert data["backend"] == "local" and len(data["nodes"]) == 2
    assert "--nproc-per-node=2" in data["nodes"][0]["argv"]
    assert json.loads(backend.render(spec, output="json"))["nodes"][1]["env"]["STARVERSE_NODE_INDEX"] == "1"
    assert backend.submit(spec, dry_run=True).id == "dry-run"
    assert backend.list() == []
    assert not settings.experiments.exists() or not any(settings.experiments.rglob("spec.json"))
    with pytest.raises(BadInputError):
        backend.render(spec, output="xml")


@pytest.mark.parametrize("template", ["tp", "pp"])
def test_split_templates_run_on_cpu_and_refuse_one_process(template: str) -> None:
    spec = JobSpec(
        name="m",
        script="x.py",
        nodes=1,
        procs_per_node=4,
        template=template,
        tensor_parallel=2 if template == "tp" else 1,
        pipeline_parallel=2 if template == "pp" else 1,
    )
    check_template(spec)  # gloo on CPU: DTensor and torch.distributed.pipelining run there
    check_template(spec.replace(accelerator="a100-80g"))
    assert spec.data_parallel == 2
    with pytest.raises(BadInputError, match="parallel") as err:  # a split model needs more than one rank
        spec.replace(procs_per_node=1)
    assert err.value.hint


@pytest.mark.parametrize("framework", ["megatron", "deepspeed"])
def test_frameworks_need_gpus(framework: str) -> None:
    with pytest.raises(BadInputError, match="needs GPUs"):
        check_template(JobSpec(name="m", script="x.py", framework=framework))


def test_megatron_and_deepspeed_arguments() -> None:
    spec = JobSpec(
        name="m",
        script="pretrain_gpt.py",
        nodes=2,
        procs_per_node=8,
        accelerator="a100-80g",
        template="tp",
        tensor_parallel=4,
        pipeline_parallel=2,
        framework="megatron",
        steps=1000,
        checkpoint_every=100,
    )
    args = megatron_args(spec, checkpoint_dir="/c", tensorboard_dir="/t")

    def value(flag: str) -> str:
        return args[args.index(flag) + 1]

    assert value("--tensor-model-parallel-size") == "4" and value("--pipeline-model-parallel-size") == "2"
    assert value("--train-iters") == "1000" and value("--save-interval") == "100"
    assert value("--save") == value("--load") == "/c"
    assert "--use-distributed-optimizer" in args  # data parallel degree 16 / 8 = 2
    ds = deepspeed_config(spec.replace(framework="deepspeed", template="fsdp", tensor_parallel=1, pipeline_parallel=1))
    assert ds["zero_optimization"]["stage"] == 3
    assert framework_args(spec.replace(framework="deepspeed"), run_dir="/r")[-1] == "/r/ds_config.json"
    assert framework_args(spec.replace(framework="torch")) == []


def test_example_scripts_exist() -> None:
    for name in ("ddp", "fsdp", "tp", "pp"):
        assert example_script(name).is_file()
    assert Path(example_script("ddp")).read_text().startswith('"""Template ``ddp``')


def test_previews_show_no_torchrun_restarts_where_the_backend_owns_them(settings: Settings) -> None:
    """``--max-restarts 3`` is the supervisor's (or the cluster backend's) budget: torchrun never
    restarts a group on its own, on every backend's preview."""
    from jupyter_starverse.backends.kubernetes import KubernetesBackend
    from jupyter_starverse.backends.slurm import SlurmBackend

    spec = JobSpec(name="dry", script=str(example_script("ddp")), nodes=2, procs_per_node=2, max_restarts=3)
    local = yaml.safe_load(LocalBackend(settings).render(spec, output="yaml"))
    argv = [a for node in local["nodes"] for a in node["argv"] if a.startswith("--max-restarts")]
    assert argv == ["--max-restarts=0", "--max-restarts=0"] and local["max_node_relaunches"] == 3
    slurm = SlurmBackend(settings).render(spec)
    # on Slurm srun starts the ranks themselves: no torchrun agent, so nothing restarts a group but the requeue
    assert "torch.distributed.run" not in slurm and "--max-restarts" not in slurm
    assert "requeued 3 time(s) (max_restarts)" in slurm
    pytest.importorskip("kubernetes")
    kube = KubernetesBackend(settings).render(spec)
    # on Kubernetes the cluster restarts: the Job per index, torchrun re-forming the group (3 + 3 preemptions)
    assert "--max-restarts=6" in kube and "backoffLimitPerIndex: 3" in kube
