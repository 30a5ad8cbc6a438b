"""Names of what a recipe job reads and writes."""

from __future__ import annotations

from pathlib import Path

__all__ = ["LINEAGE_FILE", "MODEL_DIR", "RECIPE_FILE", "TRAIN_SCRIPT"]

#: The script a recipe job runs on every rank.
TRAIN_SCRIPT = Path(__file__).with_name("lm.py")
#: The finished model (``save_pretrained``, tokenizer included) inside the run folder.
MODEL_DIR = "model"
#: Where a saved model says what it came from (base model, data versions, recipe, run).
LINEAGE_FILE = "starverse-lineage.json"
#: The recipe, its parameters and its batch plan, written by rank 0 into the run folder.
RECIPE_FILE = "recipe.json"
