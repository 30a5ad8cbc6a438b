"""Per-rank entry of a LLaMA-Factory recipe job, run by LLaMA-Factory's own Python under our torchrun.

Standard library + ``llamafactory`` only (its environment need not hold this project). Rank 0
writes the rendered YAML and ``dataset_info.json`` into ``<run>/llamafactory`` (``<run>`` is
``STARVERSE_EXPERIMENT_DIR``), every rank waits for them, then runs LLaMA-Factory's training
entry (``run_exp``, what ``FORCE_TORCHRUN=1 llamafactory-cli train`` starts on each rank).

Under the monitor: a ``TrainerCallback`` passed through ``run_exp(callbacks=...)`` appends every
logged step (loss, learning rate, gradient norm, tokens/s) to ``<run>/metrics.jsonl`` in the
runtime's record layout; a SIGTERM (cancel, budget cap, preemption) makes the trainer save a
checkpoint at the end of the step and stop; a restarted attempt resumes from the newest
``checkpoint-N`` of the output folder.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

_STEP = re.compile(r"checkpoint-(\d+)$")


def latest_checkpoint(output_dir: Path) -> Path | None:
    """The newest complete ``checkpoint-N`` folder the trainer wrote (``trainer_state.json`` inside)."""
    found = []
    for d in output_dir.glob("checkpoint-*") if output_dir.is_dir() else ():
        m = _STEP.search(d.name)
        if m and (d / "trainer_state.json").is_file():
            found.append((int(m.group(1)), d))
    return max(found)[1] if found else None


def _flops_per_token(model: Any, seq_len: int) -> float:
    """Training FLOPs per token as our trainer counts them: 6 N (non-embedding) + 12 L d T for attention."""
    cfg = getattr(model, "config", None)
    params = sum(p.numel() for n, p in model.named_parameters() if "embed" not in n)
    layers = int(getattr(cfg, "num_hidden_layers", 0) or 0)
    hidden = int(getattr(cfg, "hidden_size", 0) or 0)
    return float(6 * params + 12 * layers * hidden * seq_len)


def _number(value: Any) -> float | int | None:
    """A logged value as a number (some trainers log formatted strings such as ``'5.881'``)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _record_stop(run: Path, step: int, signalled: float | None) -> None:
    """``stops/rankN.json`` (the runtime's layout): this rank stopped on a SIGTERM after ``step``, checkpointed."""
    rank = int(os.environ.get("RANK", "0"))
    record = {
        "rank": rank,
        "node": int(os.environ.get("STARVERSE_NODE_INDEX", "0")),
        "attempt": int(os.environ.get("STARVERSE_ATTEMPT", "0")),
        "pid": os.getpid(),
        "signalled": signalled,  # None: another rank got the SIGTERM, this one followed
        "step": step,
        "checkpoint_step": step,
        "time": time.time(),
    }
    folder = run / "stops"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".rank{rank}.json.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(record))
        tmp.replace(folder / f"rank{rank}.json")
    except OSError as e:  # the record helps the launcher; it must never break the stop
        print(f"could not record the stop: {e}", flush=True)


def make_callbacks(run: Path, *, seq_len: int = 0, world_size: int = 1) -> list[Any]:
    """The monitor's callback: logged steps into ``run/metrics.jsonl`` (loss, lr, grad norm, tokens/s,
    TFLOPS per card); a SIGTERM on any rank -> every rank saves a checkpoint at the end of the step,
    records the stop and exits with ``STARVERSE_PREEMPT_EXIT`` (the launcher requeues or cancels)."""
    from transformers import TrainerCallback

    stop: dict[str, Any] = {"asked": False, "signalled": None, "agreed": False}
    seen: dict[str, float] = {}

    def _on_term(signum: int, _frame: object) -> None:
        stop["asked"] = True
        stop["signalled"] = stop["signalled"] or time.time()

    signal.signal(signal.SIGTERM, _on_term)

    def _agree(args: Any) -> bool:
        """True on every rank when any rank got SIGTERM (one all-reduce a step), so all save together."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
            return bool(stop["asked"])
        import torch

        flag = torch.tensor([1.0 if stop["asked"] else 0.0], device=getattr(args, "device", None) or "cpu")
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item() > 0)

    class Monitor(TrainerCallback):  # type: ignore[misc]  # transformers is not followed (pyproject)
        def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            seen["time"], seen["tokens"] = time.time(), float(getattr(state, "num_input_tokens_seen", 0) or 0)
            if model is not None and seq_len:
                seen["flops_per_token"] = _flops_per_token(model, seq_len)

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if not state.is_world_process_zero or not logs or "loss" not in logs or "train_loss" in logs:
                return  # the end-of-training summary (train_loss, train_runtime) is no step
            now = time.time()
            record: dict[str, Any] = {"step": int(state.global_step) - 1, "time": now, "rank": 0}
            names = {"learning_rate": "lr", "train_tokens_per_second": "tokens_per_s"}
            for key, value in logs.items():
                number = _number(value)
                if number is not None:
                    record[names.get(key, key)] = number
            tokens = float(getattr(state, "num_input_tokens_seen", 0) or 0)  # every rank's, summed by the trainer
            if tokens and "time" in seen and now > seen["time"] and tokens > seen["tokens"]:
                record["tokens"] = tokens - seen["tokens"]
                record["tokens_per_s"] = record["tokens"] / (now - seen["time"])
                if "flops_per_token" in seen:
                    record["tflops_per_card"] = seen["flops_per_token"] * record["tokens_per_s"] / world_size / 1e12
            seen["time"], seen["tokens"] = now, tokens
            run.mkdir(parents=True, exist_ok=True)
            with open(run / "metrics.jsonl", "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> Any:
            if _agree(args):
                stop["agreed"] = True
                control.should_save = True
                control.should_training_stop = True
            return control

        def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> Any:
            if not stop["agreed"]:
                return control
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                dist.barrier()  # every rank's part of the checkpoint is on disk
            step = int(state.global_step) - 1
            print(f"stopping after step {step}: checkpoint saved (checkpoint-{state.global_step})", flush=True)
            _record_stop(run, step, stop["signalled"])
            code = os.environ.get("STARVERSE_PREEMPT_EXIT")
            if code:  # nothing after the loop runs on a stopped attempt: no final model over the checkpoint
                raise SystemExit(int(code))
            return control

    return [Monitor()]


def _cpu_resume_fix() -> None:
    """Multi-process CPU runs: the HF Trainer (transformers 5.6) loads a checkpoint's optimizer state with
    ``map_location=args.device``, ``cpu:0`` there, which ``torch.load`` cannot restore to; map it to ``cpu``."""
    import torch

    load = torch.load

    def _load(*args: Any, **kwargs: Any) -> Any:
        where = kwargs.get("map_location")
        if isinstance(where, (torch.device, str)) and torch.device(where).type == "cpu":
            kwargs["map_location"] = "cpu"
        return load(*args, **kwargs)

    torch.load = _load


def _without_project_paths() -> None:
    """No folder of this project's package on ``sys.path``: its module names would shadow LLaMA-Factory's."""
    package = Path(__file__).resolve().parents[2]
    keep = []
    for entry in sys.path:
        try:
            inside = Path(entry or ".").resolve().is_relative_to(package)
        except (OSError, ValueError):
            inside = False
        if not inside:
            keep.append(entry)
    sys.path[:] = keep


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--dataset-info", required=True)
    p.add_argument("--resume-from", help="a checkpoint-N folder of an earlier run (a --resume launch)")
    args = p.parse_args(argv)
    _without_project_paths()
    run = Path(os.environ.get("STARVERSE_EXPERIMENT_DIR", "."))
    folder = run / "llamafactory"
    text = args.config.replace("<run>", str(run))
    config = json.loads(text)
    target = folder / "train.yaml"
    if os.environ.get("RANK", "0") == "0":
        folder.mkdir(parents=True, exist_ok=True)
        (folder / ".dataset_info.json.tmp").write_text(args.dataset_info)
        (folder / ".dataset_info.json.tmp").replace(folder / "dataset_info.json")
        (folder / ".train.yaml.tmp").write_text(json.dumps(config, indent=1))  # JSON is YAML
        (folder / ".train.yaml.tmp").replace(target)
    deadline = time.monotonic() + 120
    while not target.exists():
        if time.monotonic() > deadline:
            print("rank 0 did not write the LLaMA-Factory config", file=sys.stderr)
            return 1
        time.sleep(0.2)
    last = latest_checkpoint(Path(config["output_dir"]))  # a restart of this run: its own newest
    if last is None and args.resume_from:
        last = Path(args.resume_from)
    if last is not None:
        config["resume_from_checkpoint"] = str(last)
        print(f"resumed from {last.name} ({last.parent.parent.name})", flush=True)
    from llamafactory.train.tuner import run_exp  # type: ignore[import-not-found]

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if last is not None and config.get("use_cpu") and world > 1:
        _cpu_resume_fix()
    run_exp(config, callbacks=make_callbacks(run, seq_len=int(config.get("cutoff_len") or 0), world_size=world))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
