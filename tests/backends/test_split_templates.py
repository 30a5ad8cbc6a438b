"""tp (DTensor) and pp (torch.distributed.pipelining) train on 2 CPU processes (gloo) and a resume
changes the layout (tp -> pp) through DCP, keeping the global batch.

The reference is the unsplit model of the ddp template trained in this process on the same seed
and the same samples (one data-parallel rank: both tp and pp ranks read one stream): a split that
lost a gradient, a weight or the optimizer state on the way through the checkpoint drifts away.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_starverse._settings import Settings
from jupyter_starverse.backends.local._local import LocalBackend
from jupyter_starverse.backends.templates import example_script
from jupyter_starverse.experiments import latest_checkpoint, read_json, read_metrics
from jupyter_starverse.jobmodel import JobSpec, JobState

pytestmark = pytest.mark.slow

ARGS = ("--batch", "4", "--global-batch", "8", "--seq-len", "32")


def _spec(template: str, name: str, *, steps: int) -> JobSpec:
    return JobSpec(
        name=name,
        script=str(example_script(template)),
        template=template,
        procs_per_node=2,
        tensor_parallel=2 if template == "tp" else 1,
        pipeline_parallel=2 if template == "pp" else 1,
        steps=steps,
        checkpoint_every=steps,
        experiment="split",
        args=ARGS,
    )


def _unsplit(steps: int, resume_at: int) -> list[float]:
    """The ddp template's model and loop on one process: 8 sequences per step in 2 micro batches of 4;
    the data stream starts again at ``resume_at`` (a resumed run re-seeds its stream)."""
    import torch

    from jupyter_starverse.backends.templates._lm import FALLBACK_TEXT, CharData, TinyLM, lm_loss

    torch.manual_seed(0)
    data = CharData(FALLBACK_TEXT, seq_len=32, seed=1000)
    model = TinyLM(data.vocab, seq_len=32, layers=2)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    out = []
    for step in range(steps):
        if step == resume_at:
            data = CharData(FALLBACK_TEXT, seq_len=32, seed=1000)
        opt.zero_grad()
        total = 0.0
        for _ in range(2):
            x, y = data.batch(4)
            loss = lm_loss(model(x), y)
            (loss * 0.5).backward()  # type: ignore[no-untyped-call]
            total += loss.item() / 2
        opt.step()
        out.append(total)
    return out


def test_tp_then_pp_on_cpu_match_the_unsplit_model_across_a_layout_change(settings: Settings) -> None:
    backend = LocalBackend(settings)
    tp = backend.wait(backend.submit(_spec("tp", "tp-run", steps=3)).id, timeout=300)
    assert tp.state is JobState.SUCCEEDED, tp.reason
    log = (Path(tp.experiment_dir) / "logs" / "rank0.log").read_text()
    assert "tensor parallel 2 x data parallel 1" in log and "gloo" in log

    # the tensor-parallel checkpoint resumes as a 2-stage pipeline: another layout, the same weights
    pp = backend.submit(_spec("pp", "pp-run", steps=5).replace(resume=True))
    pp = backend.wait(pp.id, timeout=300)
    assert pp.state is JobState.SUCCEEDED, pp.reason
    log = (Path(pp.experiment_dir) / "logs" / "rank0.log").read_text()
    assert "resumed from step-00000002" in log and "batch plan on resume: batch plan unchanged" in log

    ref = _unsplit(5, resume_at=3)
    got = [p.values["loss"] for p in read_metrics(Path(tp.experiment_dir))]
    got += [p.values["loss"] for p in read_metrics(Path(pp.experiment_dir))]
    assert [p.step for p in read_metrics(Path(pp.experiment_dir))] == [3, 4]
    assert got[-1] < got[0] - 0.3  # it learns, through the layout change
    assert got == pytest.approx(ref, abs=2e-3)  # close to the unsplit model (not bit-equal: other sums)
    # the monitor's throughput: tokens/s and model TFLOPS per card on every step of both layouts
    points = read_metrics(Path(tp.experiment_dir)) + read_metrics(Path(pp.experiment_dir))
    assert all(p.values["tokens_per_s"] > 0 and p.values["tflops_per_card"] > 0 for p in points)
    ckpt = latest_checkpoint(Path(pp.experiment_dir))
    assert ckpt is not None and ckpt.step == 4
    assert read_json(ckpt.path / "meta.json")["batch"]["global_batch"] == 8
