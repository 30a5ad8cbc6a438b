"""FSDP checkpoints written by 2 ranks resume on 3: torch distributed checkpoint reshards."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_starverse._settings import Settings
from jupyter_starverse.backends.local._local import LocalBackend
from jupyter_starverse.backends.templates import example_script
from jupyter_starverse.experiments import latest_checkpoint, read_metrics
from jupyter_starverse.jobmodel import JobSpec, JobState

pytestmark = pytest.mark.slow


def test_fsdp_template_resumes_with_another_world_size(settings: Settings) -> None:
    backend = LocalBackend(settings)
    script = str(example_script("fsdp"))
    base = JobSpec(
        name="fsdp-a",
        script=script,
        template="fsdp",
        procs_per_node=2,
        steps=4,
        checkpoint_every=2,
        experiment="fsdp",
        args=("--batch", "4", "--seq-len", "32"),
    )
    first = backend.wait(backend.submit(base).id, timeout=300)
    assert first.state is JobState.SUCCEEDED, first.reason
    ckpt = latest_checkpoint(Path(first.experiment_dir))
    assert ckpt is not None and (ckpt.step, ckpt.world_size) == (3, 2)
    before = read_metrics(Path(first.experiment_dir))

    second = backend.submit(base.replace(name="fsdp-b", procs_per_node=3, steps=6, resume=True))
    second = backend.wait(second.id, timeout=300)
    assert second.state is JobState.SUCCEEDED, second.reason
    after = read_metrics(Path(second.experiment_dir))
    assert [p.step for p in after] == [4, 5]
    assert after[0].values["loss"] < before[0].values["loss"]  # trained weights came back
    log = (Path(second.experiment_dir) / "logs" / "rank2.log").read_text()
    assert "resumed from step-00000003" in log and "world size 2" in log
