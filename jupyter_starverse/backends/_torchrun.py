"""Pure builders of the ``torchrun`` command and environment of every node of a job.

The local backend runs these argv lists as processes; ``render`` shows them for a dry
run. Nothing here starts a process or touches the file system.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jupyter_starverse.envs import activation
from jupyter_starverse.jobmodel import JobSpec

__all__ = ["WORKER_MODULE", "LaunchPlan", "NodePlan", "job_env", "make_local_plan", "render_plan", "torchrun_argv"]

WORKER_MODULE = "jupyter_starverse.backends._worker"
LOCAL_ADDR = "127.0.0.1"


@dataclass(frozen=True)
class NodePlan:
    """The command and extra environment of one node (one torchrun agent)."""

    index: int
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "argv": list(self.argv), "env": dict(self.env)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NodePlan:
        return cls(int(data["index"]), tuple(data["argv"]), dict(data.get("env", {})))


@dataclass(frozen=True)
class LaunchPlan:
    """Everything the supervisor needs to start (and relaunch) the nodes of a job."""

    job_id: str
    port: int | None
    nodes: tuple[NodePlan, ...]
    max_node_relaunches: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "port": self.port,
            "max_node_relaunches": self.max_node_relaunches,
            "nodes": [n.to_json() for n in self.nodes],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LaunchPlan:
        return cls(
            job_id=str(data["job_id"]),
            port=data.get("port"),
            nodes=tuple(NodePlan.from_json(n) for n in data["nodes"]),
            max_node_relaunches=int(data.get("max_node_relaunches", 0)),
        )


def torchrun_argv(
    *,
    nnodes: int,
    nproc_per_node: int,
    rdzv_endpoint: str,
    run_id: str,
    entry: Sequence[str],
    max_restarts: int = 0,
    local_addr: str | None = None,
    rdzv_conf: Mapping[str, str] | None = None,
    no_python: bool = False,
    python: str | None = None,
) -> list[str]:
    """``python -m torch.distributed.run ...`` for one node (c10d rendezvous).

    ``entry`` is ``[-m, module, args...]``, ``[script, args...]`` or, with ``no_python``,
    a full command.
    """
    argv = [
        python or sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={nnodes}",
        f"--nproc-per-node={nproc_per_node}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={rdzv_endpoint}",
        f"--rdzv-id={run_id}",
        f"--max-restarts={max_restarts}",
    ]
    if rdzv_conf:
        argv.append("--rdzv-conf=" + ",".join(f"{k}={v}" for k, v in rdzv_conf.items()))
    if local_addr:
        argv.append(f"--local-addr={local_addr}")
    if no_python:
        argv.append("--no-python")
    argv += list(entry)
    return argv


def job_env(
    spec: JobSpec,
    *,
    job_id: str,
    run_dir: str,
    checkpoint_dir: str,
    store: str,
    hf_cache: str,
    mounts: Mapping[str, str],
    resume_from: str | None = None,
) -> dict[str, str]:
    """The environment every process of the job sees (on top of torchrun's own)."""
    env: dict[str, str] = {
        "STARVERSE_JOB_ID": job_id,
        "STARVERSE_EXPERIMENT": spec.experiment_name,
        "STARVERSE_EXPERIMENT_DIR": run_dir,
        "STARVERSE_CHECKPOINT_DIR": checkpoint_dir,
        "STARVERSE_STORE": store,
        "STARVERSE_TEMPLATE": spec.template,
        "STARVERSE_ACCELERATOR": spec.accelerator,
        "STARVERSE_MOUNTS": json.dumps(dict(mounts), sort_keys=True),
        "STARVERSE_TENSOR_PARALLEL": str(spec.tensor_parallel),
        "STARVERSE_PIPELINE_PARALLEL": str(spec.pipeline_parallel),
        "HF_HUB_CACHE": hf_cache,
        "HF_HUB_OFFLINE": "1",
        "TENSORBOARD_LOGDIR": f"{run_dir}/tensorboard",
        "WANDB_DIR": run_dir,
        "WANDB_MODE": "offline",
        "PYTHONUNBUFFERED": "1",
        # torch 2.13: a restarted worker group must not reuse the rendezvous store.
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
    }
    if not spec.is_gpu:
        env["OMP_NUM_THREADS"] = "1"
    if spec.steps is not None:
        env["STARVERSE_STEPS"] = str(spec.steps)
    if spec.checkpoint_every is not None:
        env["STARVERSE_CHECKPOINT_EVERY"] = str(spec.checkpoint_every)
    if resume_from:
        env["STARVERSE_RESUME_FROM"] = resume_from
    # the job's environment and working folder on the store (envs): PYTHONPATH, STARVERSE_ENV, STARVERSE_WORKDIR
    env.update(activation(store, spec.env_id, spec.workdir_id))
    if spec.workdir_id and spec.workdir:
        env["STARVERSE_WORKDIR_SOURCE"] = spec.workdir  # the worker runs a script of it from the unpacked copy
    env.update(spec.env)
    return env


def make_local_plan(
    spec: JobSpec,
    *,
    job_id: str,
    port: int | None,
    env: Mapping[str, str],
    entry: Sequence[str],
    no_python: bool = False,
) -> LaunchPlan:
    """One torchrun agent per node on 127.0.0.1; the rendezvous store is hosted by the
    supervisor (``is_host=false``), so any node can die and be relaunched."""
    endpoint = f"{LOCAL_ADDR}:{port if port else '<port>'}"
    nodes = []
    for i in range(spec.nodes):
        argv = torchrun_argv(
            nnodes=spec.nodes,
            nproc_per_node=spec.procs_per_node,
            rdzv_endpoint=endpoint,
            run_id=job_id,
            entry=entry,
            max_restarts=0,  # the supervisor relaunches the whole group (backends._restarts)
            local_addr=LOCAL_ADDR,
            rdzv_conf={"is_host": "false", "join_timeout": "120"},
            no_python=no_python,
        )
        nodes.append(NodePlan(i, tuple(argv), {**env, "STARVERSE_NODE_INDEX": str(i)}))
    return LaunchPlan(job_id, port, tuple(nodes), max_node_relaunches=spec.max_restarts)


def render_plan(plan: LaunchPlan, *, output: str = "yaml", extra: Mapping[str, Any] | None = None) -> str:
    """The plan as YAML or JSON text (what a dry run prints)."""
    data: dict[str, Any] = {"backend": "local", **plan.to_json(), **(extra or {})}
    if output == "json":
        return json.dumps(data, indent=2)
    import yaml

    return str(yaml.safe_dump(data, sort_keys=False, width=200))
