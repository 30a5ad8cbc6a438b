"""Issue 28 on the cluster backends: Slurm activates the environment before srun; Kubernetes pods
check it and unpack the working folder in an init step (schemas + Pod Security restricted)."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from jupyter_starverse.backends._torchrun import job_env
from jupyter_starverse.backends.slurm._script import SlurmLaunch, render_script
from jupyter_starverse.jobmodel import JobSpec

ENV = "a" * 64
WD = "b" * 64


def _spec(**kw: Any) -> JobSpec:
    return JobSpec(name="demo", script="/home/ann/proj/train.py", env_from="notebook", workdir="/home/ann/proj",
                   env_id=ENV, workdir_id=WD, **kw)  # fmt: skip


def test_slurm_script_activates_the_environment_before_srun() -> None:
    spec = _spec(nodes=2)
    env = job_env(spec, job_id="j", run_dir="/exp/r", checkpoint_dir="/exp/r/c", store="/store",
                  hf_cache="/store/hf", mounts={})  # fmt: skip
    text = render_script(SlurmLaunch("j", spec, "/exp/r", "/usr/bin/python3", ("-m", "x", "train.py"), env=env))
    step = text.index(f"/store/envs/{ENV}/env.json")
    assert step < text.index("srun ")  # checked on the batch host before any rank starts
    assert f"export PYTHONPATH=/store/envs/{ENV}/site${{PYTHONPATH:+:$PYTHONPATH}}" in text
    assert f"export STARVERSE_WORKDIR=/store/workdirs/{WD}" in text
    assert "export PYTHONPATH=/store" not in text.replace(f"export PYTHONPATH=/store/envs/{ENV}/site$", "")
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)
    plain = render_script(SlurmLaunch("j", JobSpec(name="demo", script="/t.py"), "/exp/r", "python", ("t.py",)))
    assert "envs/" not in plain  # a job without an environment renders as before


@pytest.mark.parametrize("kind", ["job", "jobset", "pytorchjob"])
def test_kubernetes_pods_check_the_env_and_unpack_the_workdir(kind: str) -> None:
    pytest.importorskip("kubernetes_validate")
    from jupyter_starverse.backends.kubernetes._manifests import WORKDIR_MOUNT, KubeLaunch, make_manifests, to_dict
    from tests.k8s import _psa
    from tests.k8s.test_manifests import _cluster, _launch, _validate_objects

    base = _launch(2)
    launch = KubeLaunch(**{**base.__dict__, "spec": _spec(nodes=2)})
    objects = [to_dict(o) for o in make_manifests(launch, _cluster(kind))]
    _validate_objects(objects, 2)
    pods = [pod for obj in objects for _, pod in _psa.pods_of(obj)]
    assert pods
    for pod in pods:
        assert _psa.violations(pod, level="restricted") == []
        init = {c["name"]: c for c in pod["spec"].get("initContainers", [])}["job-env"]
        assert init["command"][-4:] == ["/store", ENV, WD, WORKDIR_MOUNT]
        trainer = pod["spec"]["containers"][0]
        mount = next(m for m in trainer["volumeMounts"] if m["name"] == "workdir")
        assert mount["mountPath"] == WORKDIR_MOUNT and mount["readOnly"] is True
        env = {e["name"]: e.get("value") for e in trainer["env"]}
        assert env["PYTHONPATH"] == f"/store/envs/{ENV}/site" and env["STARVERSE_WORKDIR"] == WORKDIR_MOUNT
        assert "/home/ann/proj/train.py" in trainer["command"]  # the worker runs its packed copy
        assert any(v["name"] == "workdir" and "emptyDir" in v for v in pod["spec"]["volumes"])


def test_the_init_step_fails_with_the_fix_when_the_env_is_missing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from jupyter_starverse.envs._unpack import main

    assert main([str(tmp_path), ENV, "-", str(tmp_path / "wd")]) == 2
    (tmp_path / "envs" / ENV).mkdir(parents=True)
    (tmp_path / "envs" / ENV / "env.json").write_text("{}")
    assert main([str(tmp_path), ENV, "-", str(tmp_path / "wd")]) == 0
