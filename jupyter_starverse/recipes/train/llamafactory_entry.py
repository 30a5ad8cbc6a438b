"""Per-rank entry of a LLaMA-Factory recipe job, run by LLaMA-Factory's own Python under our torchrun.

Standard library + ``llamafactory`` only (its environment need not hold this project). Rank 0
writes the rendered YAML and ``dataset_info.json`` into ``<run>/llamafactory`` (``<run>`` is
``STARVERSE_EXPERIMENT_DIR``), every rank waits for them, then runs LLaMA-Factory's training
entry (``run_exp``, what ``FORCE_TORCHRUN=1 llamafactory-cli train`` starts on each rank).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


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
    from llamafactory.train.tuner import run_exp  # type: ignore[import-not-found]

    run_exp(config)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
