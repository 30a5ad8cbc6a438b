"""A mixed plan renders as well as it prices: the split plan's job of every pool, shaped for the pool."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_starverse.cli import main
from jupyter_starverse.costs import PriceTable, mixed_stages, parse_pools, plan_mixed
from jupyter_starverse.jobmodel import JobSpec

SEED = "rtx4090:256,a100-80g:128"


def test_every_pool_gets_its_own_job_shaped_and_named_for_it(table: PriceTable) -> None:
    spec = JobSpec(name="llm", code="pass", env={"A": "1"}, max_restarts=2)
    pools = parse_pools(SEED)
    stages = mixed_stages(spec, pools)
    shares = {
        o.pools[0].accelerator: o.work_share
        for o in plan_mixed(pools, "12d", "on_demand", table=table).options
        if o.kind == "pool"
    }
    assert [(s.spec.accelerator, s.spec.nodes, s.spec.procs_per_node) for s in stages] == [
        ("rtx4090", 32, 8),
        ("a100-80g", 16, 8),
    ]
    assert [s.spec.name for s in stages] == ["llm-rtx4090", "llm-a100-80g"]
    assert len({s.spec.experiment_name for s in stages}) == 2  # own world size, own checkpoints
    assert [s.share for s in stages] == pytest.approx([shares["rtx4090"], shares["a100-80g"]])
    for i, s in enumerate(stages):
        assert s.spec.max_restarts == 2 and s.spec.env["A"] == "1"
        assert (s.spec.env["STARVERSE_MIXED_STAGE"], s.spec.env["STARVERSE_MIXED_STAGES"]) == (str(i), "2")
        assert s.spec.env["STARVERSE_MIXED_PLAN"] == SEED
        assert float(s.spec.env["STARVERSE_MIXED_SHARE"]) == pytest.approx(s.share, abs=1e-6)


def _dry_run(capsys: pytest.CaptureFixture[str], tmp_path: Path, *extra: str) -> str:
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    code = main(["launch", str(script), "--mixed", SEED, "--dry-run", *extra])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def test_launch_mixed_dry_run_renders_each_pools_manifests(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("kubernetes")
    out = _dry_run(capsys, tmp_path, "--backend", "kubernetes", "-o", "json")
    items = json.loads(out)["items"]
    jobs = [o for o in items if o["kind"] == "Job"]
    assert [j["spec"]["completions"] for j in jobs] == [32, 16]
    for job, gpu in zip(jobs, ("rtx4090", "a100-80g"), strict=True):
        pod = job["spec"]["template"]["spec"]
        assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
        assert gpu in json.dumps(pod.get("nodeSelector") or pod.get("affinity"))  # placed on its pool
        env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
        assert env["STARVERSE_MIXED_PLAN"] == SEED
    assert sum(o["kind"] == "Service" for o in items) == 2


def test_launch_mixed_dry_run_prints_one_batch_script_per_pool(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = _dry_run(capsys, tmp_path, "--backend", "slurm", "-o", "sbatch")
    assert out.count("#!/bin/bash") == 2 and "# ---- train-rtx4090.sbatch" in out
    assert "#SBATCH --nodes=32" in out and "#SBATCH --nodes=16" in out
    assert out.index("train-rtx4090") < out.index("train-a100-80g")  # the plan's order


def test_launch_mixed_refuses_a_shape_of_its_own(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["launch", "x.py", "--mixed", SEED, "--gpu", "a100-80g", "--dry-run"]) == 2
    assert "sizes every pool's job itself" in capsys.readouterr().err
