"""The recipes' trainer: what runs INSIDE a recipe job (imports only the runtime and below).

``lm.py`` is the script a recipe job starts on every rank; it calls :func:`main`, which reads
``--recipe/--objective/--model/--data/--param`` and trains a Hugging Face model mounted from
the store (continued pretraining, SFT, DPO, KTO or a reward model) through
``jupyter_starverse.runtime`` (process group, DDP/FSDP, checkpoints any world size resumes,
metrics, budget and preemption). A ``%%sv train --recipe NAME`` cell may run its own code
first and then call ``main()``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from jupyter_starverse.experiments import BatchPlan, batch_plan

from ._formats import ChatMessage, LabeledCompletion, PreferencePair, Prompt, data_files, read_records, write_jsonl
from ._paths import LINEAGE_FILE, MODEL_DIR, RECIPE_FILE, TRAIN_SCRIPT

__all__ = [
    "LINEAGE_FILE",
    "MODEL_DIR",
    "RECIPE_FILE",
    "TRAIN_SCRIPT",
    "BatchPlan",
    "ChatMessage",
    "LabeledCompletion",
    "PreferencePair",
    "Prompt",
    "batch_plan",
    "data_files",
    "main",
    "read_records",
    "write_jsonl",
]


def main(argv: Sequence[str] | None = None, *, on_step: Callable[[int, dict[str, float]], Any] | None = None) -> None:
    """Train as the recipe arguments (``argv``, default ``sys.argv[1:]``) say; ``on_step`` sees each step's metrics."""
    from ._trainer import run

    run(argv, on_step=on_step)
