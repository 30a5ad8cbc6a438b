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


def make_callbacks(run: Path) -> list[Any]:
    """The monitor's callback: logged steps into ``run/metrics.jsonl``; SIGTERM -> save, then stop."""
    from transformers import TrainerCallback

    stop = {"asked": False}

    def _on_term(signum: int, _frame: object) -> None:
        stop["asked"] = True

    signal.signal(signal.SIGTERM, _on_term)

    class Monitor(TrainerCallback):  # type: ignore[misc]
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if not state.is_world_process_zero or not logs or "train_runtime" in logs:
                return  # the end-of-training summary is no step
            record: dict[str, Any] = {"step": int(state.global_step) - 1, "time": time.time(), "rank": 0}
            names = {"learning_rate": "lr", "train_tokens_per_second": "tokens_per_s"}
            for key, value in logs.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    record[names.get(key, key)] = value
            run.mkdir(parents=True, exist_ok=True)
            with open(run / "metrics.jsonl", "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> Any:
            if stop["asked"]:
                control.should_save = True
                control.should_training_stop = True
                print(f"stopping after step {state.global_step}: checkpoint saved", flush=True)
            return control

    return [Monitor()]


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--dataset-info", required=True)
    args = p.parse_args(argv)
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
    last = latest_checkpoint(Path(config["output_dir"]))
    if last is not None:
        config["resume_from_checkpoint"] = str(last)
        print(f"resumed from {last.name}", flush=True)
    from llamafactory.train.tuner import run_exp  # type: ignore[import-not-found]

    run_exp(config, callbacks=make_callbacks(run))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
