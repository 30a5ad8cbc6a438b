"""Batched inference for evaluation: log-likelihoods and greedy continuations of token ids.

``TorchPredictor`` runs a Hugging Face causal LM folder (fp32, CPU unless CUDA is there) on a
whole batch at once: right-padded sequences for log-likelihoods, left-padded prompts for
``generate``. ``OnnxPredictor`` runs an exported ``model.onnx`` through the export's
:class:`~jupyter_starverse.export.OrtCausalLM` (its graph takes no padding mask, so one example
at a time, with the KV cache for decoding). Both count the examples they ran (``calls``), which
the resume test reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jupyter_starverse.errors import BadInputError, MissingDependencyError

__all__ = ["Predictor", "load_predictor"]

GRAPH = "model.onnx"


class Predictor:
    """A model and its tokenizer; subclasses give :meth:`logliks` and :meth:`generate`."""

    engine = "predictor"

    def __init__(self, folder: Path) -> None:
        import transformers
        from transformers import AutoConfig, AutoTokenizer

        transformers.utils.logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # the eval's own progress says what happens
        self.folder = folder
        self.config = AutoConfig.from_pretrained(folder)
        self.tokenizer: Any = AutoTokenizer.from_pretrained(folder)
        self.eos = self.tokenizer.eos_token_id
        self.pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else (self.eos or 0)
        self.context = int(getattr(self.config, "max_position_embeddings", 0) or 0) or 2048
        self.calls = 0

    def encode(self, text: str) -> list[int]:
        return [int(i) for i in self.tokenizer(text, add_special_tokens=False)["input_ids"]]

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))

    def logliks(self, pairs: Sequence[tuple[list[int], list[int]]]) -> list[float]:
        """Sum of log-probabilities of each continuation after its context."""
        return [ll for ll, _ in self.scored(pairs)]

    def scored(self, pairs: Sequence[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        """Each continuation's log-likelihood and whether greedy decoding would have produced it."""
        raise NotImplementedError

    def generate(self, prompts: Sequence[list[int]], max_new_tokens: int) -> list[list[int]]:
        """Greedy continuations (stopped at EOS)."""
        raise NotImplementedError

    def _fit(self, context: list[int], cont: list[int]) -> tuple[list[int], list[int]]:
        """Keep the end of a context that does not fit with its continuation."""
        room = max(1, self.context - len(cont))
        return (context[-room:] if context else []), cont[: self.context - 1]


class TorchPredictor(Predictor):
    engine = "transformers"

    def __init__(self, folder: Path, *, threads: int | None = None) -> None:
        super().__init__(folder)
        import torch
        from transformers import AutoModelForCausalLM

        if threads:
            torch.set_num_threads(threads)
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model: Any = AutoModelForCausalLM.from_pretrained(folder, dtype="float32")
        self.model = self.model.to(self.device)  # type: ignore[arg-type]
        self.model.eval()

    def scored(self, pairs: Sequence[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        import torch

        seqs = []
        spans = []
        for context, cont in pairs:
            context, cont = self._fit(context, cont)
            if not context:  # the first token has no prediction: it is the context
                context, cont = cont[:1], cont[1:]
            seqs.append(context + cont)
            spans.append((len(context), len(context) + len(cont)))
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(s)
            mask[i, : len(s)] = 1
        with torch.no_grad():
            logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits.float()
        logp = torch.log_softmax(logits, dim=-1).cpu()
        out: list[tuple[float, bool]] = []
        for i, (a, b) in enumerate(spans):
            if b <= a:
                out.append((0.0, True))
                continue
            target = ids[i, a:b]
            span = logp[i, a - 1 : b - 1]
            out.append((float(span.gather(1, target.unsqueeze(1)).sum()), bool((span.argmax(-1) == target).all())))
        self.calls += len(pairs)
        return out

    def generate(self, prompts: Sequence[list[int]], max_new_tokens: int) -> list[list[int]]:
        import torch

        prompts = [p[-(self.context - max_new_tokens) :] or [self.eos or 0] for p in prompts]
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :] = torch.tensor(p)
            mask[i, width - len(p) :] = 1
        with torch.no_grad():
            out = self.model.generate(
                input_ids=ids.to(self.device),
                attention_mask=mask.to(self.device),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=self.pad,
                eos_token_id=self.eos,
            )
        result = []
        for row in out[:, width:].tolist():
            toks = []
            for t in row:
                if t == self.eos:
                    break
                toks.append(int(t))
            result.append(toks)
        self.calls += len(prompts)
        return result


class OnnxPredictor(Predictor):
    engine = "onnxruntime"

    def __init__(self, folder: Path, *, threads: int | None = None) -> None:
        super().__init__(folder)
        from jupyter_starverse.export import OrtCausalLM

        self.graph = OrtCausalLM(folder / GRAPH, self.config, threads=threads or 1)

    def scored(self, pairs: Sequence[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        import numpy as np

        out: list[tuple[float, bool]] = []
        for context, cont in pairs:
            context, cont = self._fit(context, cont)
            if not context:
                context, cont = cont[:1], cont[1:]
            if not cont:
                out.append((0.0, True))
                continue
            seq = np.array([context + cont], dtype=np.int64)
            logits, _ = self.graph.step(seq, None)
            z = logits[0].astype(np.float64)
            z = z - z.max(axis=-1, keepdims=True)
            logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
            a = len(context)
            greedy = all(int(logp[a - 1 + k].argmax()) == t for k, t in enumerate(cont))
            out.append((float(sum(logp[a - 1 + k, t] for k, t in enumerate(cont))), greedy))
        self.calls += len(pairs)
        return out

    def generate(self, prompts: Sequence[list[int]], max_new_tokens: int) -> list[list[int]]:
        out = []
        for p in prompts:
            p = p[-(self.context - max_new_tokens) :] or [self.eos or 0]
            toks, _ = self.graph.greedy(p, max_new_tokens, stop_at_eos=True)
            out.append([t for t in toks if t != self.eos])
        self.calls += len(prompts)
        return out


def load_predictor(folder: Path, *, threads: int | None = None) -> Predictor:
    """The predictor of a model folder: onnxruntime for an exported graph, else transformers."""
    has_graph = (folder / GRAPH).is_file()
    if not has_graph and not (folder / "config.json").is_file():
        raise BadInputError(
            f"{folder} is not a model folder", field="model", hint="hf:ORG/REPO@REV, exp:NAME or a folder"
        )
    kind = "onnxruntime" if has_graph else "transformers"
    try:
        return (OnnxPredictor if has_graph else TorchPredictor)(folder, threads=threads)
    except ImportError as e:
        extra = "export" if has_graph else "models"
        raise MissingDependencyError(e.name or kind, extra=extra, purpose=f"evaluating with {kind}") from e
    except (OSError, ValueError, KeyError, RuntimeError) as e:  # transformers' many kinds for a broken folder
        raise BadInputError(
            f"cannot load the model in {folder}: {type(e).__name__}: {e}",
            field="model",
            hint="evaluate a Hugging Face causal LM folder (config.json, weights, tokenizer) or an ONNX export of one",
        ) from e
