"""Models from the store, loaded with transformers offline: a sentence encoder and a causal LM.

The encoder is any BERT-style model folder (a sentence-transformers folder works: its
transformer sits at the top level); sentences become the mean of the last hidden states over
real tokens, L2-normalised, as sentence-transformers does for mean pooling.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jupyter_starverse.errors import BadInputError, MissingDependencyError

__all__ = ["Encoder", "LanguageModel", "char_vectors"]


def _transformers() -> Any:
    try:
        import torch
        import transformers
    except ImportError as e:
        raise MissingDependencyError("transformers", extra="models", purpose="embedding and perplexity models") from e
    transformers.logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    transformers.logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    return torch, transformers


def _check_folder(folder: Path, what: str) -> None:
    if not (folder / "config.json").is_file():
        raise BadInputError(
            f"{folder} is not a Hugging Face model folder (no config.json) for the {what}",
            field="model",
            hint="give a store model, e.g. hf:ORG/REPO (pull it first with `starverse store pull`)",
        )


def _load(folder: Path, what: str, tokenizer_class: Any, model_class: Any) -> tuple[Any, Any]:
    """Tokenizer and model (eval mode) of ``folder``; a broken folder is a clear error."""
    try:
        return tokenizer_class.from_pretrained(folder), model_class.from_pretrained(folder).eval()
    except Exception as e:  # transformers, safetensors and json raise many kinds for a broken folder
        raise BadInputError(
            f"cannot load the {what} in {folder}: {type(e).__name__}: {e}",
            field="model",
            hint="give a Hugging Face model folder with its weights and tokenizer, e.g. a store model hf:ORG/REPO",
        ) from e


class Encoder:
    """Sentence embeddings from a model folder (mean pooling, unit length)."""

    def __init__(self, folder: Path, *, max_length: int = 256, batch_size: int = 32) -> None:
        _check_folder(folder, "embedding model")
        torch, tf = _transformers()
        self.torch = torch
        self.tokenizer, self.model = _load(folder, "embedding model", tf.AutoTokenizer, tf.AutoModel)
        self.max_length, self.batch_size = max_length, batch_size
        self.params = sum(p.numel() for p in self.model.parameters())

    def embed(self, texts: Sequence[str]) -> Any:
        """A float32 numpy array ``(len(texts), dim)`` of unit vectors."""
        torch = self.torch
        out = []
        with torch.inference_mode():
            for i in range(0, len(texts), self.batch_size):
                batch = self.tokenizer(
                    list(texts[i : i + self.batch_size]),
                    padding=True,
                    truncation=True,
                    max_length=self.max_length,
                    return_tensors="pt",
                )
                hidden = self.model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                out.append(torch.nn.functional.normalize(mean, dim=-1).float().numpy())
        import numpy as np

        return np.concatenate(out) if out else np.zeros((0, 0), dtype=np.float32)


class LanguageModel:
    """Per-document perplexity under a causal LM folder."""

    def __init__(self, folder: Path, *, max_tokens: int = 256) -> None:
        _check_folder(folder, "language model")
        torch, tf = _transformers()
        self.torch = torch
        self.tokenizer, self.model = _load(folder, "language model", tf.AutoTokenizer, tf.AutoModelForCausalLM)
        self.max_tokens = max_tokens
        self.params = sum(p.numel() for p in self.model.parameters())

    def perplexity(self, text: str) -> float:
        torch = self.torch
        ids = self.tokenizer(text, truncation=True, max_length=self.max_tokens, return_tensors="pt")["input_ids"]
        if ids.shape[1] < 2:
            return float("nan")
        with torch.inference_mode():
            loss = self.model(input_ids=ids, labels=ids).loss
        return float(math.exp(min(float(loss), 50.0)))


def char_vectors(texts: Sequence[str], *, dim: int = 4096) -> Any:
    """Hashed character-bigram count vectors, unit length: relevance without a model."""
    import zlib

    import numpy as np

    out = np.zeros((len(texts), dim), dtype=np.float32)
    for i, text in enumerate(texts):
        t = " ".join(text.lower().split())
        for j in range(len(t) - 1):
            out[i, zlib.crc32(t[j : j + 2].encode()) % dim] += 1.0
        norm = float(np.linalg.norm(out[i]))
        if norm:
            out[i] /= norm
    return out


def threads() -> int:
    """Torch threads to use (OMP_NUM_THREADS when set)."""
    return int(os.environ.get("OMP_NUM_THREADS") or 1)
