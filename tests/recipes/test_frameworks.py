"""LLaMA-Factory and Megatron-LM: rendering always; the LLaMA-Factory run only where its environment exists."""

from __future__ import annotations

import json
import os
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from jupyter_starverse.cli import main as cli_main
from jupyter_starverse.client import Starverse
from jupyter_starverse.errors import BadInputError
from jupyter_starverse.recipes import get_recipe
from jupyter_starverse.recipes._llamafactory import dataset_info, find_llamafactory, llamafactory_config, render_yaml
from jupyter_starverse.recipes._megatron import megatron_args, read_index, write_indexed_dataset
from tests.recipes.conftest import MODEL

#: LLaMA-Factory's environment, read before the isolated test environment drops STARVERSE_* variables
LLAMAFACTORY = os.environ.get("STARVERSE_LLAMAFACTORY")


def test_llamafactory_yaml_and_dataset_info_follow_the_recipe_parameters() -> None:
    values = get_recipe("llamafactory-sft").resolve({"lr": 1e-4, "steps": 30, "warmup_steps": 3, "seq_len": 256})
    config = llamafactory_config(
        values, objective="sft", model_dir="/store/m", dataset_dir="/run/lf", output_dir="/run/model", accumulation=4
    )
    parsed = yaml.safe_load(render_yaml(config))
    assert parsed["stage"] == "sft" and parsed["finetuning_type"] == "full" and parsed["do_train"] is True
    assert (parsed["learning_rate"], parsed["max_steps"], parsed["warmup_steps"]) == (1e-4, 30, 3)
    assert parsed["lr_scheduler_type"] == "cosine_with_min_lr" and parsed["cutoff_len"] == 256
    assert (parsed["per_device_train_batch_size"], parsed["gradient_accumulation_steps"]) == (4, 4)
    assert parsed["bf16"] is True and parsed["dataset"] == "starverse"
    # checkpoints on the job's schedule into the run folder (was save_strategy: no)
    assert (parsed["save_strategy"], parsed["save_steps"], parsed["output_dir"]) == ("steps", 3, "/run/model")
    every = llamafactory_config(
        values, objective="sft", model_dir="/m", dataset_dir="/d", output_dir="/o", accumulation=1, checkpoint_every=5
    )
    assert every["save_steps"] == 5 and every["save_only_model"] is False
    assert every["include_num_input_tokens_seen"] is True and "use_cpu" not in every  # the monitor's tokens/s
    cpu = llamafactory_config(
        values, objective="sft", model_dir="/m", dataset_dir="/d", output_dir="/o", accumulation=1, on_gpu=False
    )
    assert (cpu["bf16"], cpu["use_cpu"]) == (False, True)  # HF refuses bf16 on CPU without use_cpu
    info = dataset_info("sft", ["/store/chat"])["starverse"]
    assert info["formatting"] == "sharegpt" and info["columns"] == {"messages": "messages"}
    assert dataset_info("dpo", ["/p"])["starverse"]["ranking"] is True
    assert dataset_info("kto", ["/u"])["starverse"]["columns"]["kto_tag"] == "label"


def test_llamafactory_steps_reach_the_monitor_and_a_restart_resumes_its_newest_checkpoint(tmp_path: Path) -> None:
    """The callback the entry passes to LLaMA-Factory's run_exp, driven as the HF Trainer drives it."""
    from types import SimpleNamespace

    from jupyter_starverse.experiments import read_metrics
    from jupyter_starverse.recipes.train.llamafactory_entry import latest_checkpoint, make_callbacks

    (monitor,) = make_callbacks(tmp_path)
    control = SimpleNamespace(should_save=False, should_training_stop=False)
    state = SimpleNamespace(global_step=0, is_world_process_zero=True, num_input_tokens_seen=0)
    monitor.on_train_begin(None, state, control)
    for step, loss in ((1, 6.1), (2, "5.4")):  # LLaMA-Factory's trainer may log formatted strings
        state = SimpleNamespace(global_step=step, is_world_process_zero=True, num_input_tokens_seen=192 * step)
        logs = {"loss": loss, "learning_rate": 1e-4, "grad_norm": 0.5, "train_runtime": 0.5 * step, "epoch": "0.5"}
        monitor.on_log(None, state, control, logs=logs)
    monitor.on_log(None, state, control, logs={"train_runtime": 3.0, "train_loss": 5.7})  # the summary: no step
    points = read_metrics(tmp_path, from_logs=False)
    assert [(p.step, p.values["loss"], p.values["lr"]) for p in points] == [(0, 6.1, 1e-4), (1, 5.4, 1e-4)]
    assert all(p.values["tokens"] == 192 and p.values["tokens_per_s"] > 0 for p in points)  # per step, every rank

    import os
    import signal

    os.kill(os.getpid(), signal.SIGTERM)  # the callback's handler: save at the end of the step, then stop
    monitor.on_step_end(None, state, control)
    assert control.should_save and control.should_training_stop
    signal.signal(signal.SIGTERM, signal.SIG_DFL)

    for n, complete in ((2, True), (4, True), (6, False)):  # checkpoint-6 is half written
        d = tmp_path / "model" / f"checkpoint-{n}"
        d.mkdir(parents=True)
        if complete:
            (d / "trainer_state.json").write_text("{}")
    found = latest_checkpoint(tmp_path / "model")
    assert found is not None and found.name == "checkpoint-4"


def test_llamafactory_launch_needs_its_environment(store: Starverse) -> None:
    if find_llamafactory() is not None:
        pytest.skip("LLaMA-Factory is installed here: the refusal cannot be shown")
    with pytest.raises(BadInputError, match="llamafactory-cli` is not on PATH") as e:
        store.recipes.spec("llamafactory-sft", model=MODEL, data="chat")
    assert "own environment" in (e.value.hint or "") and "pip install llamafactory" in (e.value.hint or "")
    # STARVERSE_LLAMAFACTORY naming a Python without llamafactory is refused, not taken for absent
    with pytest.raises(BadInputError, match="cannot import llamafactory") as e:
        find_llamafactory(sys.executable)
    assert "STARVERSE_LLAMAFACTORY" in (e.value.hint or "")


@pytest.fixture
def lf_env(monkeypatch: pytest.MonkeyPatch) -> str:
    """LLaMA-Factory's environment for the store's settings: STARVERSE_LLAMAFACTORY, else PATH; skip without."""
    python = find_llamafactory(LLAMAFACTORY)
    if python is None:
        pytest.skip("LLaMA-Factory is not installed (STARVERSE_LLAMAFACTORY unset, no llamafactory-cli on PATH)")
    if LLAMAFACTORY:
        monkeypatch.setenv("STARVERSE_LLAMAFACTORY", LLAMAFACTORY)
    return python


def _wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


@pytest.mark.slow
def test_llamafactory_sft_trains_under_the_monitor_is_cancelled_and_resumes(lf_env: str, store: Starverse) -> None:
    """The real LLaMA-Factory on the tiny Llama, 2 ranks: steps and loss in the monitor, checkpoints on the
    job's schedule, a cancel checkpoints and stops, a --resume continues from the newest checkpoint-N."""
    from jupyter_starverse.experiments import read_metrics

    params = {"steps": 500, "warmup_steps": 1, "global_batch": 4, "micro_batch": 2, "seq_len": 64, "lr": 1e-3}
    job = {"procs_per_node": 2, "checkpoint_every": 2}
    backend = store.backend("local")  # 500 steps: still running when the cancel comes
    first = store.launch(store.recipes.spec("llamafactory-sft", model=MODEL, data="chat", params=params, **job))
    run = Path(backend.get(first.id).experiment_dir)
    _wait_for(lambda: (run / "model" / "checkpoint-2" / "trainer_state.json").is_file(), 600, "checkpoint-2")
    cancelled = backend.cancel(first.id, timeout=120)
    assert cancelled.state.value == "cancelled", cancelled.reason
    before = read_metrics(run, from_logs=False)
    assert [p.step for p in before] == list(range(len(before))) and len(before) >= 2  # the monitor's steps
    assert all(p.values["loss"] > 0 and p.values["tokens_per_s"] > 0 for p in before)
    stops = json.loads((run / "stops" / "rank0.json").read_text())  # SIGTERM -> checkpoint of the last step
    saved = run / "model" / f"checkpoint-{stops['checkpoint_step'] + 1}"
    assert (saved / "trainer_state.json").is_file() and stops["checkpoint_step"] == before[-1].step
    assert (run / "logs" / "rank1.log").is_file()  # each rank's own log, as for our own scripts

    end = before[-1].step + 4  # the resumed run: three more steps
    params |= {"steps": end}
    spec = store.recipes.spec("llamafactory-sft", model=MODEL, data="chat", params=params, resume=True, **job)
    assert spec.command is not None and spec.command[-2:] == ("--resume-from", str(saved))
    done = backend.wait(store.launch(spec).id, timeout=600)
    assert done.state.value == "succeeded", done.reason
    again = Path(done.experiment_dir)
    after = read_metrics(again, from_logs=False)
    assert [p.step for p in after] == list(range(before[-1].step + 1, end))  # the step continues
    assert f"resumed from {saved.name}" in (again / "logs" / "rank0.log").read_text()
    assert (again / "model" / "config.json").is_file() and list((again / "model").glob("checkpoint-*"))


def test_a_framework_process_that_fails_names_its_error_in_the_job(client: Starverse) -> None:
    """A command job's ranks run no worker of ours (no error record): the job's reason still names the error."""
    import sys

    from jupyter_starverse.jobmodel import JobSpec

    crash = "import sys; print('loading', flush=True); raise ValueError('assign use_cpu to train on CPU')"
    spec = JobSpec(name="framework-fails", command=(sys.executable, "-c", crash), procs_per_node=2)
    done = client.backend("local").wait(client.launch(spec).id, timeout=180)
    assert done.state.value == "failed"
    assert "exited with code 1: ValueError: assign use_cpu to train on CPU" in (done.reason or ""), done.reason


# A framework that checkpoints on SIGTERM in its own format (as LLaMA-Factory's checkpoint-N) and says so in
# stops/rankN.json, the runtime's record; a restart continues after the step the last attempt recorded.
_OWN_CHECKPOINTS = """
import json, os, signal, sys, time
from pathlib import Path
run, rank = Path(os.environ["STARVERSE_EXPERIMENT_DIR"]), int(os.environ["RANK"])
attempt = int(os.environ["STARVERSE_ATTEMPT"])
got = []
signal.signal(signal.SIGTERM, lambda *_: got.append(time.time()))
earlier = [json.loads(f.read_text()) for f in run.glob("stops/attempt-*/rank*.json")]
for step in range(max([r["checkpoint_step"] + 1 for r in earlier], default=0), 60):
    if rank == 0:
        with open(run / "metrics.jsonl", "a") as f:
            f.write(json.dumps({"step": step, "time": time.time(), "rank": 0, "loss": 1.0 / (step + 1)}) + "\\n")
    time.sleep(0.1)
    if got:
        stop = {"rank": rank, "attempt": attempt, "signalled": got[0], "step": step, "checkpoint_step": step,
                "time": time.time()}
        (run / "stops").mkdir(exist_ok=True)
        (run / "stops" / f"rank{rank}.json").write_text(json.dumps(stop))
        sys.exit(int(os.environ["STARVERSE_PREEMPT_EXIT"]))
"""


def test_a_preempted_framework_resumes_after_its_own_checkpoint(client: Starverse) -> None:
    from jupyter_starverse.experiments import read_metrics, read_status
    from jupyter_starverse.jobmodel import JobSpec

    backend = client.backend("local")
    job = client.launch(JobSpec(name="own-checkpoints", command=(sys.executable, "-c", _OWN_CHECKPOINTS)))
    run = Path(backend.get(job.id).experiment_dir)
    _wait_for(lambda: len(read_metrics(run, from_logs=False)) >= 2, 120, "two steps")
    backend.preempt(job.id)
    done = backend.wait(job.id, timeout=180)
    assert done.state.value == "succeeded" and done.restarts == 1, done.reason
    status = read_status(run)
    assert status is not None and len(status.events) == 1
    saved = status.events[0].checkpoint_step
    assert saved is not None and status.events[0].steps_lost == 0  # it saved the step it stopped at
    assert f"the checkpoint at step {saved}; resuming from step {saved + 1}" in (run / "logs" / "rank0.log").read_text()
    assert [p.step for p in read_metrics(run, from_logs=False)] == list(range(60))  # no step run twice


def test_megatron_indexed_dataset_round_trips_in_megatron_core_layout(tmp_path: Path) -> None:
    docs = [[5, 6, 7, 1], [9, 1], [300, 2, 1]]
    written = write_indexed_dataset(docs, tmp_path / "text_document", vocab_size=450)
    idx = (tmp_path / "text_document.idx").read_bytes()
    assert idx[:9] == b"MMIDIDX\x00\x00" and struct.unpack_from("<QBQQ", idx, 9) == (1, 8, 3, 4)  # uint16
    back = read_index(tmp_path / "text_document.idx")
    assert back == written and back.lengths == (4, 2, 3) and back.pointers == (0, 8, 12)
    assert back.documents == (0, 1, 2, 3)
    assert [back.tokens(tmp_path / "text_document.bin", i) for i in range(3)] == docs
    assert (tmp_path / "text_document.bin").stat().st_size == 9 * 2
    try:
        from megatron.core.datasets.indexed_dataset import IndexedDataset
    except ImportError:
        return  # megatron-core is not installed: our reader stands in for it
    ds = IndexedDataset(str(tmp_path / "text_document"))
    assert [list(ds[i]) for i in range(3)] == docs


def test_megatron_pretokenize_and_arguments(store: Starverse, capsys: pytest.CaptureFixture[str]) -> None:
    entry = store.recipes.pretokenize("corpus", model=MODEL, name="corpus-megatron")
    assert entry.ref == "corpus-megatron@v1" and entry.state == "cached"
    folder = store.catalog.mount("corpus-megatron@v1")
    index = read_index(folder / "text_document.idx")
    assert len(index.lengths) == 1 and index.lengths[0] > 100  # the corpus file is one document
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(store.catalog.mount(MODEL))
    assert tok.decode(index.tokens(folder / "text_document.bin", 0)).startswith("The quick brown fox")

    values = get_recipe("megatron-gpt").resolve({"steps": 100})
    config = json.loads((store.catalog.mount(MODEL) / "config.json").read_text())
    args = megatron_args(values, config, data_prefix="/d/text_document", tokenizer="/m")
    pairs = dict(zip(args[::2], args[1::2], strict=False))
    assert (pairs["--num-layers"], pairs["--hidden-size"], pairs["--lr-decay-style"]) == ("2", "64", "cosine")
    assert pairs["--global-batch-size"] == "512" and pairs["--data-path"] == "/d/text_document"
    assert "--bf16" in args and "--group-query-attention" in args

    gpu = store.recipes.spec(
        "megatron-gpt",
        model=MODEL,
        data="corpus-megatron@v1",
        accelerator="a100-80g",
        nodes=2,
        procs_per_node=8,
        tensor_parallel=2,
        pipeline_parallel=2,
        params={"global_batch": 64, "micro_batch": 1},
    )
    assert gpu.framework == "megatron" and gpu.command is not None and gpu.command[1].endswith("pretrain_gpt.py")
    from jupyter_starverse.backends.templates import framework_args

    rendered = framework_args(gpu)
    assert rendered[:4] == ["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2"]
    cpu = store.recipes.spec(
        "megatron-gpt", model=MODEL, data="corpus-megatron@v1", params={"global_batch": 8, "micro_batch": 1}
    )
    with pytest.raises(BadInputError, match="Megatron-LM needs GPUs"):
        store.preview(cpu)
    with pytest.raises(BadInputError, match="holds no Megatron index"):
        store.recipes.spec("megatron-gpt", model=MODEL, data="corpus", accelerator="a100-80g")

    # from the CLI (which always sends framework="torch"): Megatron's own tensor parallel with --template tp
    launch = ["launch", "--recipe", "megatron-gpt", "--model", MODEL, "--data", "corpus-megatron@v1"]
    gpus = [
        "--backend",
        "kubernetes",
        "--gpu",
        "a100-80g",
        "--nodes",
        "2",
        "--procs",
        "8",
        "--param",
        "global_batch=64",
    ]
    assert cli_main([*launch, *gpus, "--template", "tp", "--tp", "4", "--dry-run", "-o", "json", "--json"]) == 0
    rendered = json.dumps(json.loads(capsys.readouterr().out))
    assert "--tensor-model-parallel-size" in rendered and "pretrain_gpt.py" in rendered
    assert cli_main([*launch, *gpus, "--framework", "deepspeed", "--dry-run"]) == 2
    assert "leave --framework out" in capsys.readouterr().err


# Megatron-LM's own lines (megatron/training: _print_args and training_log, `--log-throughput`), as rank N prints them
MEGATRON_LOG = """\
------------------------ arguments ------------------------
  global_batch_size ............................... 64
  seq_length ...................................... 1024
-------------------- end of arguments ---------------------
 [2026-11-28 18:48:17] iteration        1/     100 | consumed samples:           64 | elapsed time per iteration (ms): 2048.0 | throughput per GPU (TFLOP/s/GPU): 68.2 | learning rate: 1.000000E-05 | global batch size:    64 | lm loss: 1.082345E+01 | loss scale: 1.0 | grad norm: 9.876 | number of skipped iterations:   0 | number of nan iterations:   0 |
 [2026-11-28 18:48:19] iteration        2/     100 | consumed samples:          128 | elapsed time per iteration (ms): 1024.0 | throughput per GPU (TFLOP/s/GPU): 136.4 | learning rate: 2.000000E-05 | global batch size:    64 | lm loss: 1.051200E+01 | loss scale: 1.0 | grad norm: 7.500 | number of skipped iterations:   0 | number of nan iterations:   0 |
 [2026-11-28 18:48:21] iteration       50/    5000 | consumed samples:        51200 | elapsed time per iteration (ms): 61674.3 | throughput per GPU (TFLOP/s/GPU): 68.2
"""  # noqa: E501


def test_megatron_log_lines_give_the_monitor_step_loss_tokens_per_second_and_tflops(tmp_path: Path) -> None:
    from jupyter_starverse.experiments import parse_log_metrics, progress, read_metrics

    points = parse_log_metrics(MEGATRON_LOG)
    assert [p.step for p in points] == [0, 1]  # iteration 1 is our step 0; a line without a loss is no step
    first, second = (p.values for p in points)
    assert (first["loss"], first["lr"], first["grad_norm"], first["tflops_per_card"]) == (10.82345, 1e-5, 9.876, 68.2)
    assert second["tokens_per_s"] == pytest.approx(64 * 1024 / 1.024)  # global batch x seq_length / iteration time
    # Megatron prints on the last rank (its last pipeline stage): the monitor reads that log when rank 0 has none
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rank0.log").write_text("building GPT model ...\n")
    (logs / "rank1.log").write_text("")
    (logs / "rank3.log").write_text(MEGATRON_LOG)
    assert [p.values["loss"] for p in read_metrics(tmp_path)] == [10.82345, 10.512]
    shown = progress(read_metrics(tmp_path), total=100)
    assert shown.step == 1 and shown.values["tflops_per_card"] == 136.4
