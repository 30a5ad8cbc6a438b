"""Examples for each objective, tokenized the same way on every rank, and the step's share of each rank.

Sample order depends only on the seed and the optimizer step: step ``s`` takes global samples
``s x G .. s x G + G - 1`` (``G`` the global batch) of a per-epoch permutation, and rank ``r``
takes its micro batches from them. Any world size therefore sees the same samples at the same
step, which is what keeps a resume with another world size on the same course.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_starverse.errors import BadInputError
from jupyter_starverse.experiments import BatchPlan

from ._formats import LabeledCompletion, PreferencePair, Prompt, data_files, iter_jsonl, parse_message, read_records

__all__ = ["Example", "Sampler", "load_examples"]

IGNORE = -100


@dataclass(frozen=True)
class Example:
    """One training sample as token ids: ``parts`` per objective (see :func:`load_examples`)."""

    parts: tuple[tuple[int, ...], ...]
    labels: tuple[int, ...] = ()
    flag: bool = True  # KTO: thumbs up

    @functools.cached_property
    def labelled(self) -> int:
        """Tokens the next-token loss counts (labels after the first that are not ignored)."""
        return sum(1 for x in self.labels[1:] if x != IGNORE)


class Encoder:
    """Text -> token ids with the model's chat template (or a plain ``role: text`` layout without one)."""

    def __init__(self, tokenizer: Any, seq_len: int) -> None:
        self.tok = tokenizer
        self.seq_len = seq_len
        self.eos = tokenizer.eos_token or ""

    def ids(self, text: str) -> list[int]:
        return list(self.tok(text, add_special_tokens=False)["input_ids"]) if text else []

    def render(self, messages: list[dict[str, str]], *, generation: bool) -> str:
        if getattr(self.tok, "chat_template", None):
            return str(self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation))
        text = "".join(f"{m['role']}: {m['content']}{self.eos}\n" for m in messages)
        return text + ("assistant: " if generation else "")

    def messages(self, prompt: Prompt) -> list[dict[str, str]]:
        if isinstance(prompt, str):
            return [{"role": "user", "content": prompt}]
        return [m.to_json() for m in prompt]

    def prompt_and_answer(self, prompt: Prompt, answer: str) -> tuple[list[int], list[int]]:
        """Token ids of the prompt (with the generation prompt) and of the answer turn after it."""
        msgs = self.messages(prompt)
        head = self.render(msgs, generation=True)
        full = self.render([*msgs, {"role": "assistant", "content": answer}], generation=False)
        tail = full[len(head) :] if full.startswith(head) else answer + self.eos
        p, a = self.ids(head), self.ids(tail)
        keep = max(self.seq_len - len(a), self.seq_len // 2)  # cut the prompt's start, not the answer
        p = p[-keep:] if len(p) > keep else p
        return p, a[: max(self.seq_len - len(p), 1)]

    def chat(self, messages: list[dict[str, str]]) -> tuple[list[int], list[int]]:
        """Ids and labels of a conversation: only the assistant's answers are labelled."""
        ids: list[int] = []
        labels: list[int] = []
        done = ""
        for i, m in enumerate(messages):
            if m["role"] == "assistant":
                head = self.render(messages[:i], generation=True) if i else ""
                prefix = head[len(done) :] if head.startswith(done) else ""
                full = self.render(messages[: i + 1], generation=False)
                answer = full[len(done) + len(prefix) :] if full.startswith(done + prefix) else m["content"] + self.eos
                p, a = self.ids(prefix), self.ids(answer)
                ids += p + a
                labels += [IGNORE] * len(p) + a
            else:
                full = self.render(messages[: i + 1], generation=False)
                part = self.ids(full[len(done) :] if full.startswith(done) else full)
                ids += part
                labels += [IGNORE] * len(part)
            done = full
        return ids[: self.seq_len], labels[: self.seq_len]


def _texts(folder: Path) -> list[str]:
    out = [p.read_text(encoding="utf-8", errors="replace") for p in data_files(folder, (".txt",))]
    if data_files(folder, (".jsonl",)):
        for where, obj in iter_jsonl(folder):
            if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
                raise BadInputError(f"{where}: continued pretraining reads {{'text': ...}} lines", field="data")
            out.append(obj["text"])
    return [t for t in out if t.strip()]


def _chats(folder: Path) -> list[list[dict[str, str]]]:
    chats = []
    for where, obj in iter_jsonl(folder):
        if isinstance(obj, dict) and isinstance(obj.get("messages"), list):
            chats.append([parse_message(m, where).to_json() for m in obj["messages"]])
        elif isinstance(obj, dict) and isinstance(obj.get("prompt"), str) and isinstance(obj.get("response"), str):
            chats.append(
                [{"role": "user", "content": obj["prompt"]}, {"role": "assistant", "content": obj["response"]}]
            )
        else:
            raise BadInputError(
                f"{where}: SFT reads {{'messages': [...]}} or {{'prompt', 'response'}} lines",
                field="data",
                hint=json.dumps(
                    {"messages": [{"role": "user", "content": "..."}, {"role": "assistant", "content": "..."}]}
                ),
            )
    return chats


def load_examples(objective: str, folders: list[Path], tokenizer: Any, *, seq_len: int, pack: bool) -> list[Example]:
    """Every example of the mounted datasets for ``objective``.

    ``cpt``: ``parts=(ids,)``, labels = ids (packed into ``seq_len`` windows when ``pack``);
    ``sft``: ``parts=(ids,)``, labels only on answers; ``dpo``/``reward``: ``parts=(prompt,
    chosen, rejected)``; ``kto``: ``parts=(prompt, completion)`` and ``flag`` = the label.
    """
    enc = Encoder(tokenizer, seq_len)
    out: list[Example] = []
    if objective == "cpt":
        stream: list[int] = []
        for folder in folders:
            for text in _texts(folder):
                ids = enc.ids(text + enc.eos)
                if pack:
                    stream += ids
                else:
                    out.append(Example((tuple(ids[:seq_len]),), tuple(ids[:seq_len])))
        for i in range(0, len(stream) - seq_len + 1, seq_len):
            window = tuple(stream[i : i + seq_len])
            out.append(Example((window,), window))
        if pack and stream and not out:
            out.append(Example((tuple(stream),), tuple(stream)))  # less text than one window
    elif objective == "sft":
        for folder in folders:
            for chat in _chats(folder):
                ids, labels = enc.chat(chat)
                if any(x != IGNORE for x in labels):
                    out.append(Example((tuple(ids),), tuple(labels)))
    elif objective in ("dpo", "reward"):
        for folder in folders:
            for pair in read_records(folder, PreferencePair):
                p, c = enc.prompt_and_answer(pair.prompt, pair.chosen)
                _, r = enc.prompt_and_answer(pair.prompt, pair.rejected)
                out.append(Example((tuple(p), tuple(c), tuple(r[: max(seq_len - len(p), 1)]))))
    elif objective == "kto":
        for folder in folders:
            for rec in read_records(folder, LabeledCompletion):
                p, a = enc.prompt_and_answer(rec.prompt, rec.completion)
                out.append(Example((tuple(p), tuple(a)), flag=rec.label))
    else:
        raise BadInputError(f"unknown objective {objective!r}", field="objective")
    if not out:
        raise BadInputError(
            f"the data holds no usable {objective} examples",
            field="data",
            hint="check the data format of the recipe (`starverse recipes show NAME`)",
        )
    return out


class Sampler:
    """The examples of one optimizer step for one rank and micro batch (same set for any world size)."""

    def __init__(self, examples: list[Example], *, seed: int) -> None:
        self.examples = examples
        self.seed = seed
        self._perms: dict[int, list[int]] = {}

    def _perm(self, epoch: int) -> list[int]:
        if epoch not in self._perms:
            import torch

            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self._perms = {epoch: torch.randperm(len(self.examples), generator=g).tolist()}
        return self._perms[epoch]

    def sample(self, index: int) -> Example:
        n = len(self.examples)
        return self.examples[self._perm(index // n)[index % n]]

    def step(self, step: int, plan: BatchPlan) -> list[Example]:
        """Every example of optimizer step ``step`` (the whole global batch)."""
        base = step * plan.global_batch
        return [self.sample(base + j) for j in range(plan.global_batch)]

    def micro(self, step: int, micro: int, rank: int, plan: BatchPlan) -> list[Example]:
        """Rank ``rank``'s ``micro``-th micro batch of ``step``."""
        start = step * plan.global_batch + (micro * plan.world_size + rank) * plan.micro_batch
        return [self.sample(start + k) for k in range(plan.micro_batch)]
