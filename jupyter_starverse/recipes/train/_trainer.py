"""The recipe training loop on the runtime: mixed precision by device, cosine schedule with warm-up,
gradient accumulation and clipping, DDP or FSDP, checkpoints any world size resumes, tokens/s and
TFLOPS per card, and at the end the model saved with ``save_pretrained`` and its lineage."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from jupyter_starverse import runtime as sv
from jupyter_starverse.errors import BadInputError, MissingDependencyError
from jupyter_starverse.experiments import BatchPlan, batch_plan

from ._data import Sampler, load_examples
from ._objectives import UNIT, kto_kl, micro_loss, tokens_of
from ._paths import LINEAGE_FILE, MODEL_DIR, RECIPE_FILE
from ._steps import all_sum as _all_sum
from ._steps import no_sync as _no_sync

__all__ = ["run"]


def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="recipe")
    p.add_argument("--recipe", required=True)
    p.add_argument("--objective", required=True, choices=[*sorted(UNIT), "vlm"])
    p.add_argument("--model", required=True)
    p.add_argument("--data", action="append", default=[])
    p.add_argument("--param", action="append", default=[])
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    params: dict[str, Any] = {}
    for item in args.param:
        key, _, value = item.partition("=")
        params[key] = _value(value)
    args.params = params
    return args


def _value(text: str) -> Any:
    if text in ("true", "false"):
        return text == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _precision(name: str, device: str) -> tuple[torch.dtype | None, bool]:
    """The autocast dtype for ``precision`` on ``device`` and whether fp16 needs a grad scaler."""
    gpu = device.startswith("cuda")
    if name == "fp32":
        return None, False
    if name == "auto":
        if gpu:
            name = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        else:  # bf16 autocast is slower than fp32 on CPUs without bf16 instructions (bench_recipes.py)
            name = "bf16" if _cpu_has_bf16() else "fp32"
            if name == "fp32":
                return None, False
    dtype = torch.bfloat16 if name == "bf16" else torch.float16
    return dtype, gpu and dtype == torch.float16


def _cpu_has_bf16() -> bool:
    """Whether this CPU has bf16 instructions (AVX512-BF16 or AMX), read from ``/proc/cpuinfo`` (Linux)."""
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def _flops_per_token(model: Any, seq_len: int, *, with_reference: bool) -> float:
    """Training FLOPs per token: 6 N (non-embedding parameters) + 12 L d T for attention; a frozen
    reference model's forward adds a third of that."""
    cfg = model.config
    params = sum(p.numel() for n, p in model.named_parameters() if "embed" not in n)
    layers = int(getattr(cfg, "num_hidden_layers", 0) or 0)
    hidden = int(getattr(cfg, "hidden_size", 0) or 0)
    train = sv.train_flops_per_token(params, layers=layers, hidden=hidden, seq_len=seq_len)
    return float(train * (4 / 3 if with_reference else 1.0))


def _transformers() -> Any:
    try:
        import transformers
    except ImportError as e:
        raise MissingDependencyError("transformers", extra="models", purpose="recipes") from e
    return transformers


def _load(objective: str, path: Path) -> Any:
    transformers = _transformers()

    if objective == "reward":
        return transformers.AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)
    if objective == "vlm":
        return transformers.AutoModelForImageTextToText.from_pretrained(path)
    return transformers.AutoModelForCausalLM.from_pretrained(path)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    tmp.replace(path)


def _record_plan(args: argparse.Namespace, plan: BatchPlan, base: Path, data: list[Path]) -> None:
    """Rank 0: ``recipe.json`` in the run folder (a later resume reads the batch plan from it)."""
    env = sv.job_env()
    if env.run_dir is None:
        return
    env.run_dir.mkdir(parents=True, exist_ok=True)
    _write_json(
        env.run_dir / RECIPE_FILE,
        {
            "recipe": args.recipe,
            "objective": args.objective,
            "model": args.model,
            "model_commit": base.name,
            "data": [{"ref": r, "path": str(p)} for r, p in zip(args.data, data, strict=True)],
            "params": args.params,
            "batch": plan.to_json(),
        },
    )


def _resume_note(plan: BatchPlan) -> str | None:
    """What a resume keeps and recomputes, when the checkpoint came from another batch plan."""
    found = sv.find_resume_checkpoint()
    if found is None:
        return None
    try:
        old = json.loads((found.path.parent.parent / RECIPE_FILE).read_text())["batch"]
        before = BatchPlan(**{k: int(old[k]) for k in BatchPlan.__dataclass_fields__})
    except (OSError, ValueError, KeyError, TypeError):
        before = batch_plan(
            global_batch=plan.global_batch, micro_batch=plan.requested_micro_batch, world_size=found.world_size
        )
    return f"resume from step {found.step}: {plan.change_from(before)}; schedule continues at step {found.step + 1}"


def run(argv: Sequence[str] | None = None, *, on_step: Callable[[int, dict[str, float]], Any] | None = None) -> None:
    """Train the recipe the arguments describe (see :mod:`jupyter_starverse.recipes.train`)."""
    transformers = _transformers()

    args = _args(argv)
    p = args.params
    ctx = sv.init()
    env = sv.job_env()
    total = int(p.get("steps", 100))  # the schedule's length
    until = min(env.steps or total, total)  # this job may run only the first steps of it (resume later)
    seq_len = int(p.get("seq_len", 512))
    plan = batch_plan(
        global_batch=int(p.get("global_batch", 8)), micro_batch=int(p.get("micro_batch", 1)), world_size=ctx.world_size
    )
    base = sv.mount_path(args.model)
    if not args.data:
        raise BadInputError("the recipe got no --data", field="data", hint="launch with --data DATASET")
    folders = [sv.mount_path(d) for d in args.data]

    def cosine(opt: Any, steps: int) -> Callable[[int], float]:
        return transformers.get_cosine_with_min_lr_schedule_with_warmup(  # type: ignore[no-any-return]
            opt, int(p.get("warmup_steps", 0)), steps, min_lr_rate=float(p.get("min_lr_ratio", 0.0))
        ).lr_lambdas[0]

    if args.objective == "vlm":  # a vision-language stage: images + captions, some modules frozen
        from .vlm import run_stage

        if ctx.is_main:
            _record_plan(args, plan, base, folders)
        staged = run_stage(
            args, base=base, folders=folders, plan=plan, until=until, total=total, schedule=cosine, on_step=on_step
        )
        if staged is not None:
            save_model(staged, None, args, base, folders, total=total, objective="vlm")
        return
    tokenizer = transformers.AutoTokenizer.from_pretrained(base)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if args.objective == "ppo":  # rollouts instead of a fixed set of examples
        from ._rl import run_ppo

        if ctx.is_main:
            _record_plan(args, plan, base, folders)
        trained = run_ppo(
            args, tokenizer=tokenizer, base=base, folders=folders, load=_load, schedule=cosine, until=until,
            total=total, on_step=on_step,
        )  # fmt: skip
        if trained is not None:
            save_model(trained, tokenizer, args, base, folders, total=total, objective="ppo")
        return
    examples = load_examples(args.objective, folders, tokenizer, seq_len=seq_len, pack=bool(p.get("pack", True)))
    sampler = Sampler(examples, seed=int(p.get("seed", 0)))
    torch.manual_seed(int(p.get("seed", 0)))  # the same initial head on every rank
    model = _load(args.objective, base)
    if args.objective == "reward":
        model.config.pad_token_id = tokenizer.pad_token_id
    reference = None
    if args.objective in ("dpo", "kto"):
        reference = _load(args.objective, base).to(ctx.device).eval().requires_grad_(False)
    flops_token = _flops_per_token(model, seq_len, with_reference=reference is not None)
    model = sv.wrap(model)
    opt = torch.optim.AdamW(
        model.parameters(), lr=float(p.get("lr", 1e-4)), weight_decay=float(p.get("weight_decay", 0.0))
    )
    schedule = transformers.get_cosine_with_min_lr_schedule_with_warmup(
        opt, int(p.get("warmup_steps", 0)), total, min_lr_rate=float(p.get("min_lr_ratio", 0.0))
    ).lr_lambdas[0]
    dtype, scaled = _precision(str(p.get("precision", "auto")), ctx.device)
    scaler = torch.amp.GradScaler("cuda") if scaled else None
    device_type = "cuda" if ctx.device.startswith("cuda") else "cpu"
    if ctx.is_main:
        _record_plan(args, plan, base, folders)
        n = sum(x.numel() for x in model.parameters()) * (1 if env.template != "fsdp" else ctx.world_size)
        print(
            f"recipe {args.recipe} ({args.objective}) on {args.model}: about {n} parameters, {len(examples)} "
            f"examples, steps to {until} of a {total}-step schedule, {plan}, precision {dtype or 'fp32'} on "
            f"{ctx.device} ({env.template})",
            flush=True,
        )
        note = _resume_note(plan)
        if note:
            print(note, flush=True)
    last: int | None = None
    for step in sv.steps(until, model=model, optimizer=opt):
        began = time.perf_counter()
        lr = float(p.get("lr", 1e-4)) * schedule(step)
        for group in opt.param_groups:
            group["lr"] = lr
        step_examples = sampler.step(step, plan)
        count = max(tokens_of(args.objective, step_examples), 1)  # the global batch's loss unit
        kl = None
        if args.objective == "kto" and reference is not None:  # one reference point for the step, every rank
            local = [sampler.micro(step, m, ctx.rank, plan) for m in range(plan.accumulation)]
            kl = kto_kl(
                model, reference, [e for mb in local for e in mb], pad=tokenizer.pad_token_id, device=ctx.device
            )
            kl = torch.tensor(_all_sum([float(kl)], ctx.device)[0] / ctx.world_size, device=ctx.device)
        loss_sum = 0.0
        seen = 0
        stats: dict[str, float] = {}
        for m in range(plan.accumulation):
            batch = sampler.micro(step, m, ctx.rank, plan)
            with _no_sync(model, m == plan.accumulation - 1), _autocast(device_type, dtype):
                loss, extra, tokens = micro_loss(
                    args.objective,
                    model,
                    batch,
                    pad=tokenizer.pad_token_id,
                    device=ctx.device,
                    params=p,
                    reference=reference,
                    kl=kl,
                )
                scaled_loss = loss * (ctx.world_size / count)  # DDP averages over ranks: the step's mean
                (scaler.scale(scaled_loss) if scaler else scaled_loss).backward()  # type: ignore[no-untyped-call]
            loss_sum += float(loss.detach())
            seen += tokens
            for k, v in extra.items():
                stats[k] = stats.get(k, 0.0) + v
        if scaler:
            scaler.unscale_(opt)
        clip = float(p.get("max_grad_norm", 0.0))
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip if clip > 0 else float("inf"))
        (scaler.step(opt) if scaler else opt.step())
        if scaler:
            scaler.update()
        opt.zero_grad(set_to_none=True)
        keys = sorted(stats)
        sums = _all_sum([loss_sum, float(seen), *(stats[k] for k in keys)], ctx.device)
        elapsed = max(time.perf_counter() - began, 1e-9)
        tokens_per_s = sums[1] / elapsed
        metrics = {
            "loss": sums[0] / count,
            "lr": lr,
            "grad_norm": float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm),
            "tokens": sums[1],
            "tokens_per_s": tokens_per_s,
            "tflops_per_card": flops_token * tokens_per_s / ctx.world_size / 1e12,
            "accumulation": plan.accumulation,
            **{k: v / len(step_examples) for k, v in zip(keys, sums[2:], strict=True)},
        }
        sv.log_metrics(step, **metrics)
        if ctx.is_main and (step % 10 == 0 or step == total - 1):
            print(
                f"step {step} loss {metrics['loss']:.4f} lr {lr:.3g} {tokens_per_s:.0f} tokens/s "
                f"{metrics['tflops_per_card']:.3g} TFLOPS/card",
                flush=True,
            )
        if on_step is not None:
            on_step(step, metrics)
        last = step
    if sv.stop_requested() or (last is not None and last + 1 < total):
        return  # stopped early (cancel, budget): the checkpoint is the result; no model folder
    save_model(model, tokenizer, args, base, folders, total=total, objective=args.objective)


def _autocast(device_type: str, dtype: torch.dtype | None) -> contextlib.AbstractContextManager[Any]:
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=dtype)


def save_model(
    model: Any, tokenizer: Any, args: argparse.Namespace, base: Path, folders: list[Path], *, total: int, objective: str
) -> Path | None:
    """Collective: the full weights gathered on rank 0 and written with ``save_pretrained`` (tokenizer and
    lineage included) into ``<run>/model``, through a temporary folder renamed at the end."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    env = sv.job_env()
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    out: Path | None = None
    if sv.rank() == 0 and env.run_dir is not None:
        final = env.run_dir / MODEL_DIR
        tmp = env.run_dir / f".{MODEL_DIR}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        fresh = _load(objective, base)
        if objective == "reward":
            fresh.config.pad_token_id = tokenizer.pad_token_id
        fresh.load_state_dict(state)
        fresh.save_pretrained(tmp)
        if tokenizer is not None:  # a vision-language stage without a tokenizer (character captions)
            tokenizer.save_pretrained(tmp)
        _write_json(
            tmp / LINEAGE_FILE,
            {
                "base_model": args.model,
                "base_commit": base.name,
                "data": [{"ref": r, "path": str(f)} for r, f in zip(args.data, folders, strict=True)],
                "recipe": args.recipe,
                "objective": objective,
                "params": args.params,
                "steps": total,
                "job_id": env.job_id,
                "run": str(env.run_dir),
                "saved": time.time(),
            },
        )
        shutil.rmtree(final, ignore_errors=True)
        tmp.replace(final)
        out = final
        what = "save_pretrained, tokenizer, lineage" if tokenizer is not None else "save_pretrained, lineage"
        print(f"saved the model ({what}) to {final}", flush=True)
    sv.barrier()
    return out
