"""The built-in recipes, and the seeds' reproductions (CogVLM, InternLM-XComposer, Qwen-VL)."""

from __future__ import annotations

from jupyter_starverse.errors import NotFoundError, did_you_mean

from ._model import Param, Recipe, Reproduction, Topology

__all__ = ["RECIPES", "SMALL_VLM_DATA", "SMALL_VLM_MODEL", "get_recipe"]

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
#: What ``--small`` of a reproduction trains on: a LLaVA (tiny CLIP tower + tiny Llama + projector) built
#: offline from its transformers config with random weights, and a generated image-text dataset, both
#: imported into the store on first use (``RecipeService.small_assets``).
SMALL_VLM_MODEL = "hf:starverse/tiny-llava@v1"
SMALL_VLM_DATA = "image-text-tiny@v1"
#: The full-size dataset a reproduction reads unless --data says otherwise: the user's store dataset in
#: the image-text layout (``train.vlm.DATA_FORMAT``).
_FULL_DATA = "image-text"
_VLM_FORMAT = (
    'captions.jsonl lines {"image": "images/0000.png", "caption": "..."} beside images/ '
    "(PNG/JPEG files, resized to the vision tower; or float32 3 x H x W .npy arrays)"
)
_SMALL = {"steps": 12, "global_batch": 8, "micro_batch": 4, "lr": 5e-2, "warmup_steps": 1, "min_lr_ratio": 0.5}
_REPRO_CAVEAT = (
    "--small trains a LLaVA-layout model (CLIP vision tower, Llama, MLP projector) at toy size with random "
    "weights on generated images, through the same stage code as the full size: it checks the pipeline "
    "(freezing, schedule, batch plan, checkpoints), not the published losses. The full-size checkpoint named "
    "here ships its own modelling code (trust_remote_code), which the trainer does not run: a full-size "
    "launch needs a transformers-native image-text-to-text checkpoint (AutoModelForImageTextToText) whose "
    "module names match --param train."
)


def _train(default: str, what: str) -> Param:
    return Param("train", default, "str", f"modules trained, comma-separated; the rest is frozen ({what})")


COGVLM = Recipe(
    name="cogvlm-stage1",
    title="CogVLM-7B stage-1 warm-up (reproduction)",
    objective="vlm",
    description="The article's stage-1 warm-up set-up: 32 x RTX 4090 for 4 h, loss 3.81 -> 2.05. As in CogVLM's "
    "first pretraining stage the vision tower and the language model are frozen and the MLP adapter (the "
    "projector) is trained; CogVLM's visual-expert modules have no counterpart in the LLaVA layout.",
    data_format=_VLM_FORMAT,
    params=(*_common(1e-4, warmup=100, global_batch=256, seq_len=512), _train("multi_modal_projector", "stage 1")),
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
        small=_SMALL,
        caveat=_REPRO_CAVEAT,
        model_ref="hf:THUDM/cogvlm-chat-hf",
        data_ref=_FULL_DATA,
        small_model=SMALL_VLM_MODEL,
        small_data=SMALL_VLM_DATA,
        trains="the projector (MLP adapter); vision tower and language model frozen",
    ),
)
XCOMPOSER = Recipe(
    name="internlm-xcomposer",
    title="InternLM-XComposer pretraining (reproduction)",
    objective="vlm",
    description="Large-scale pretraining set-up of the article: 512 x A100 for 15 days. The vision encoder is "
    "frozen; the connector (XComposer's perceive sampler, here the projector) and the language model are "
    "trained on image-text pairs.",
    data_format=_VLM_FORMAT,
    params=(
        *_common(1e-4, warmup=500, global_batch=4096, seq_len=2048),
        _train("multi_modal_projector,language_model,lm_head", "pretraining"),
    ),
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
        small=_SMALL,
        caveat=_REPRO_CAVEAT,
        model_ref="hf:internlm/internlm-xcomposer-7b",
        data_ref=_FULL_DATA,
        small_model=SMALL_VLM_MODEL,
        small_data=SMALL_VLM_DATA,
        trains="the projector and the language model; vision tower frozen",
    ),
)
QWEN_VL = Recipe(
    name="qwen-vl-stage1",
    title="Qwen-VL stage-1 pretraining (reproduction)",
    objective="vlm",
    description="Qwen-VL's published stage-1 schedule (peak lr 2e-4, 500 warm-up steps, cosine, 50k steps) "
    "on the article's 512 x A100 for 15 days. As in the paper's stage 1, the language model is frozen and "
    "the vision encoder and the vision-language adapter (here the projector) are trained.",
    data_format=_VLM_FORMAT,
    params=(
        *_common(2e-4, warmup=500, global_batch=30720, seq_len=512, steps=50000, weight_decay=0.05, min_lr_ratio=0.005),
        _train("vision_tower,multi_modal_projector", "stage 1"),
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
        small=_SMALL,
        caveat=_REPRO_CAVEAT,
        model_ref="hf:Qwen/Qwen-VL",
        data_ref=_FULL_DATA,
        small_model=SMALL_VLM_MODEL,
        small_data=SMALL_VLM_DATA,
        trains="the vision tower and the projector (adapter); language model frozen",
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
