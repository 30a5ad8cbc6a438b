"""Recipes: a catalog of training recipes (data + the code they run) for Hugging Face models.

A :class:`Recipe` is data: parameters with defaults, the parallelism it supports (``ddp``,
``fsdp``), resource and cost defaults, and for the seeds' reproductions (CogVLM,
InternLM-XComposer, Qwen-VL) the published topology and schedule. The code it runs is
:mod:`jupyter_starverse.recipes.train` (inside the job: the runtime and below only), or an
outside framework (LLaMA-Factory, Megatron-LM) in its own environment.

``Starverse.recipes`` (:class:`RecipeService`) lists and shows recipes with their cost,
resolves one into a :class:`~jupyter_starverse.jobmodel.JobSpec` (``spec``; ``align`` for
DPO/KTO from feedback), plans its batch split (``plan``) and imports a finished job's model
folder into the store with its lineage (``publish``).

Data formats (a store dataset folder of ``*.jsonl`` files, one JSON object per line; a
``prompt`` is text, taken as one user turn, or a list of chat messages
``[{"role": "system"|"user"|"assistant", "content": "..."}]`` ending before the answer):

- pairs (``dpo``, ``reward``): ``{"prompt": ..., "chosen": "...", "rejected": "..."}``
  (:class:`PreferencePair`);
- unpaired thumbs up/down (``kto``): ``{"prompt": ..., "completion": "...", "label": true|false}``
  (:class:`LabeledCompletion`);
- chat (``sft``): ``{"messages": [...]}`` or ``{"prompt": "...", "response": "..."}``; the loss
  counts only the assistant's answers, laid out by the model's chat template;
- text (``cpt``): ``*.txt`` files, or ``{"text": "..."}`` lines; packed into full sequences;
- image-text (``vlm``, the reproductions): ``captions.jsonl`` lines ``{"image": "images/0000.png",
  "caption": "..."}`` beside ``images/`` (PNG/JPEG files of any size, resized to the vision tower and
  normalised as the model's image processor says; or float32 ``3 x H x W`` ``.npy`` arrays at its size).
  ``--small`` of a reproduction builds a tiny LLaVA and such a dataset into the store on first use.

:func:`write_jsonl` writes records of the first two formats (temp file + rename);
:func:`read_records` reads and validates them, naming file and line on a bad record.
"""

from __future__ import annotations

from ._catalog import RECIPES, SMALL_VLM_DATA, SMALL_VLM_MODEL, get_recipe
from ._model import OBJECTIVES, RUNNERS, Param, Recipe, Reproduction, Topology
from ._records import Lineage, RecipeInfo, RecipeList, RecipePlan
from ._service import RecipeService, recipe_args
from .train import (
    LINEAGE_FILE,
    MODEL_DIR,
    TRAIN_SCRIPT,
    BatchPlan,
    ChatMessage,
    LabeledCompletion,
    PreferencePair,
    batch_plan,
    read_records,
    write_jsonl,
)

__all__ = [
    "LINEAGE_FILE",
    "MODEL_DIR",
    "OBJECTIVES",
    "RECIPES",
    "RUNNERS",
    "SMALL_VLM_DATA",
    "SMALL_VLM_MODEL",
    "TRAIN_SCRIPT",
    "BatchPlan",
    "ChatMessage",
    "LabeledCompletion",
    "Lineage",
    "Param",
    "PreferencePair",
    "Recipe",
    "RecipeInfo",
    "RecipeList",
    "RecipePlan",
    "RecipeService",
    "Reproduction",
    "Topology",
    "batch_plan",
    "get_recipe",
    "read_records",
    "recipe_args",
    "write_jsonl",
]
