"""The built-in recipes, and the seeds' reproductions (CogVLM, InternLM-XComposer, Qwen-VL)."""

from __future__ import annotations

from jupyter_starverse.errors import NotFoundError, did_you_mean

from ._model import Param, Recipe, Reproduction, Topology

__all__ = ["RECIPES", "get_recipe"]

_PRECISION = Param(
    "precision",
    "auto",
    "str",
    "auto: bf16 (fp16 without bf16) autocast on GPU, bf16 on CPU",
    ("auto", "bf16", "fp16", "fp32"),
)


def _common(
    lr: float,
    *,
    warmup: int = 10,
    global_batch: int = 32,
    seq_len: int = 512,
    steps: int = 1000,
    weight_decay: float = 0.01,
    min_lr_ratio: float = 0.1,
) -> tuple[Param, ...]:
    return (
        Param("lr", lr, "float", "peak learning rate (AdamW)"),
        Param("min_lr_ratio", min_lr_ratio, "float", "cosine decay ends at lr x this"),
        Param("warmup_steps", warmup, "int", "linear warm-up steps, then cosine decay"),
        Param("steps", steps, "int", "optimizer steps (the schedule's length; --steps overrides)"),
        Param("global_batch", global_batch, "int", "sequences per optimizer step, kept across world sizes"),
        Param("micro_batch", 4, "int", "sequences per rank per forward; accumulation = global / (micro x world)"),
        Param("seq_len", seq_len, "int", "tokens per sequence (packed or truncated)"),
        Param("max_grad_norm", 1.0, "float", "gradient clipping (0: off)"),
        Param("weight_decay", weight_decay, "float", "AdamW weight decay"),
        _PRECISION,
        Param("seed", 0, "int", "data order and initialisation"),
    )


_BETA = Param("beta", 0.1, "float", "strength of the pull towards the reference model")

CPT = Recipe(
    name="cpt",
    title="Continued pretraining",
    objective="cpt",
    description="Next-token loss on raw text packed into full sequences, cosine schedule with warm-up.",
    data_format="*.txt files, or *.jsonl with a 'text' field",
    params=(*_common(1e-4, warmup=50), Param("pack", True, "bool", "pack documents into full sequences")),
)
SFT = Recipe(
    name="sft",
    title="Supervised fine-tuning on chat data",
    objective="sft",
    description="The model's chat template; the loss counts only the assistant's answers.",
    data_format='*.jsonl with "messages": [{"role", "content"}, ...] (or "prompt" + "response")',
    params=_common(2e-5, warmup=20, global_batch=16),
)
DPO = Recipe(
    name="dpo",
    title="Direct preference optimisation",
    objective="dpo",
    description="-log sigmoid(beta x margin) of policy vs a frozen reference model on chosen/rejected pairs.",
    data_format='pairs *.jsonl: {"prompt", "chosen", "rejected"}',
    params=(*_common(5e-7, warmup=10, global_batch=16), _BETA),
    reference_model=True,
)
KTO = Recipe(
    name="kto",
    title="KTO on unpaired thumbs up/down",
    objective="kto",
    description="Kahneman-Tversky loss against a frozen reference model; each answer labelled good or bad.",
    data_format='unpaired *.jsonl: {"prompt", "completion", "label": true|false}',
    params=(
        *_common(5e-7, warmup=10, global_batch=16),
        _BETA,
        Param("desirable_weight", 1.0, "float", "weight of the thumbs-up answers"),
        Param("undesirable_weight", 1.0, "float", "weight of the thumbs-down answers"),
    ),
    reference_model=True,
)
REWARD = Recipe(
    name="reward",
    title="Reward model",
    objective="reward",
    description="A scalar head on the base model trained so that chosen scores above rejected (Bradley-Terry).",
    data_format='pairs *.jsonl: {"prompt", "chosen", "rejected"}',
    params=_common(1e-5, warmup=10, global_batch=16),
)
PPO = Recipe(
    name="ppo",
    title="PPO from a reward model on the feedback prompts",
    objective="ppo",
    description="Answers sampled from the policy for the prompts of a feedback dataset (the one dpo reads), "
    "scored by a reward model from the store minus beta x KL to a frozen reference; leave-one-out "
    "baseline over the answers to a prompt, PPO's clipped ratio. Reports reward and KL per step.",
    data_format='feedback *.jsonl with a "prompt" (pairs or unpaired records)',
    params=(
        *_common(1e-5, warmup=2, global_batch=8),
        Param("reward_model", "", "str", "store model scoring an answer (a reward recipe's result, hf:...)"),
        Param("samples", 4, "int", "answers sampled per prompt (the baseline is the others' mean)"),
        Param("max_new_tokens", 16, "int", "tokens per sampled answer"),
        Param("beta", 0.05, "float", "KL penalty towards the reference model"),
        Param("clip_range", 0.2, "float", "PPO ratio clip"),
        Param("ppo_epochs", 1, "int", "optimizer passes over each step's rollouts"),
    ),
    reference_model=True,
    templates=("ddp",),  # generate() on FSDP2-sharded weights would unshard every layer per token
)
LLAMAFACTORY_SFT = Recipe(
    name="llamafactory-sft",
    title="SFT with LLaMA-Factory",
    objective="sft",
    description="The same SFT parameters rendered as a LLaMA-Factory YAML + dataset_info.json, "
    "run by `llamafactory-cli train` under torchrun in LLaMA-Factory's own environment.",
    data_format='*.jsonl with "messages" (sharegpt layout in dataset_info.json)',
    params=(
        *_common(2e-5, warmup=20, global_batch=16),
        Param("finetuning_type", "full", "str", "full or lora", ("full", "lora")),
    ),
    runner="llamafactory",
)
MEGATRON_GPT = Recipe(
    name="megatron-gpt",
    title="Pretraining with Megatron-LM",
    objective="cpt",
    description="Raw text pre-tokenized on CPU into Megatron's indexed .bin/.idx format, and pretrain_gpt.py "
    "arguments (tensor/pipeline sizes, bf16, cosine decay, data path) for a Megatron container image.",
    data_format="*.txt files, or *.jsonl with a 'text' field",
    params=(*_common(3e-4, warmup=2000, global_batch=512, seq_len=4096),),
    runner="megatron",
    # Megatron's own parallelism: --template tp --tp N is --tensor-model-parallel-size N, pp likewise,
    # fsdp is --use-torch-fsdp2 (backends.templates.megatron_args)
    templates=("ddp", "fsdp", "tp", "pp"),
    nodes=64,
    procs_per_node=8,
    hours=24 * 15,
)

# -- the seeds' reproductions ---------------------------------------------------------------------
_REPRO_CAVEAT = (
    "Vision-language model: the small configuration runs the language-model side of the same trainer "
    "(schedule, batch plan, accumulation, checkpoints) on a tiny text model; the vision tower and image "
    "data are not part of this recipe."
)
COGVLM = Recipe(
    name="cogvlm-stage1",
    title="CogVLM-7B stage-1 warm-up (reproduction)",
    objective="sft",
    description="The article's stage-1 warm-up set-up: 32 x RTX 4090 for 4 h, loss 3.81 -> 2.05.",
    data_format='*.jsonl with "messages" (caption as the assistant answer)',
    params=_common(1e-4, warmup=100, global_batch=256, seq_len=512),
    nodes=4,
    procs_per_node=8,
    accelerator="rtx4090",
    hours=4.0,
    reproduction=Reproduction(
        model="CogVLM-7B",
        stage="stage-1 warm-up",
        source="the article's one-click reproduction image",
        published=Topology(4, 8, "rtx4090", 4.0),
        schedule={"precision": "bf16+fp16 mixed", "lr_schedule": "cosine with warm-up"},
        reported={"loss_start": 3.81, "loss_end": 2.05, "tflops_per_card": 1.2},
        small={"steps": 6, "global_batch": 4, "micro_batch": 1, "seq_len": 48, "lr": 3e-3, "warmup_steps": 1},
        caveat=_REPRO_CAVEAT,
    ),
)
XCOMPOSER = Recipe(
    name="internlm-xcomposer",
    title="InternLM-XComposer pretraining (reproduction)",
    objective="cpt",
    description="Large-scale pretraining set-up of the article: 512 x A100 for 15 days.",
    data_format="*.txt files, or *.jsonl with a 'text' field",
    params=(*_common(1e-4, warmup=500, global_batch=4096, seq_len=2048), Param("pack", True, "bool", "pack")),
    nodes=64,
    procs_per_node=8,
    accelerator="a100-80g",
    hours=24 * 15,
    reproduction=Reproduction(
        model="InternLM-XComposer",
        stage="pretraining",
        source="the article's 512-card set-up",
        published=Topology(64, 8, "a100-80g", 24 * 15),
        schedule={"lr_schedule": "cosine with warm-up", "precision": "bf16"},
        small={"steps": 6, "global_batch": 4, "micro_batch": 1, "seq_len": 48, "lr": 3e-3, "warmup_steps": 1},
        caveat=_REPRO_CAVEAT,
    ),
)
QWEN_VL = Recipe(
    name="qwen-vl-stage1",
    title="Qwen-VL stage-1 pretraining (reproduction)",
    objective="cpt",
    description="Qwen-VL's published stage-1 schedule (peak lr 2e-4, 500 warm-up steps, cosine, 50k steps) "
    "on the article's 512 x A100 for 15 days.",
    data_format="*.txt files, or *.jsonl with a 'text' field",
    params=(
        *_common(2e-4, warmup=500, global_batch=30720, seq_len=512, steps=50000, weight_decay=0.05, min_lr_ratio=0.005),
        Param("pack", True, "bool", "pack"),
    ),
    nodes=64,
    procs_per_node=8,
    accelerator="a100-80g",
    hours=24 * 15,
    reproduction=Reproduction(
        model="Qwen-VL",
        stage="stage-1 pretraining",
        source="Qwen-VL paper (arXiv 2308.12966), training hyper-parameters; topology: the article",
        published=Topology(64, 8, "a100-80g", 24 * 15),
        schedule={
            "lr": 2e-4,
            "min_lr": 1e-6,
            "warmup_steps": 500,
            "steps": 50000,
            "global_batch": 30720,
            "lr_schedule": "cosine",
            "weight_decay": 0.05,
            "adam_betas": [0.9, 0.98],
        },
        small={"steps": 6, "global_batch": 4, "micro_batch": 1, "seq_len": 48, "lr": 3e-3, "warmup_steps": 1},
        caveat=_REPRO_CAVEAT,
    ),
)

RECIPES: dict[str, Recipe] = {
    r.name: r for r in (CPT, SFT, DPO, KTO, REWARD, PPO, LLAMAFACTORY_SFT, MEGATRON_GPT, COGVLM, XCOMPOSER, QWEN_VL)
}


def get_recipe(name: str) -> Recipe:
    """The recipe ``name``; ``NotFoundError`` listing the recipes otherwise."""
    try:
        return RECIPES[name]
    except (KeyError, TypeError):
        raise NotFoundError(
            f"no recipe {name!r}",
            hint=f"{did_you_mean(str(name), RECIPES)}recipes: {', '.join(RECIPES)} (`starverse recipes ls`)",
        ) from None
