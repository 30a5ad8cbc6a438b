"""Models from the store, loaded with transformers offline: a sentence encoder and a causal LM.

The encoder is any BERT-style model folder (a sentence-transformers folder works: its
transformer sits at the top level); sentences become the mean of the last hidden states over
real tokens, L2-normalised, as sentence-transformers does for mean pooling.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jupyter_starverse.errors import BadInputError, MissingDependencyError

__all__ = ["Encoder", "LanguageModel", "StaticEncoder", "char_vectors", "distill_static", "load_encoder"]


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
        self.name, self.kind = folder.name, "transformer"

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


STATIC_WEIGHTS = "model.safetensors"
STATIC_MARK = "static_embeddings.json"


class StaticEncoder:
    """A static embedding model (model2vec's layout): one vector per token, a sentence the mean.

    The folder holds ``tokenizer.json``, ``model.safetensors`` (tensor ``embeddings``) and
    ``static_embeddings.json``; :func:`distill_static` makes one from a transformer folder.
    No torch at inference: a tokenizer and a table lookup, thousands of documents a second.
    """

    def __init__(self, folder: Path, *, max_tokens: int = 512) -> None:
        import numpy as np

        try:
            from safetensors.numpy import load_file
            from tokenizers import Tokenizer
        except ImportError as e:
            raise MissingDependencyError("tokenizers", extra="models", purpose="static embeddings") from e
        if not (folder / STATIC_MARK).is_file():
            raise BadInputError(
                f"{folder} is not a static embedding model (no {STATIC_MARK})",
                field="model",
                hint="distil one with jupyter_starverse.data.distill_static(TRANSFORMER_FOLDER, OUT), then "
                "`starverse store import-model OUT --repo ORG/NAME`",
            )
        self.np = np
        self.table = load_file(str(folder / STATIC_WEIGHTS))["embeddings"].astype(np.float32)
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        self.max_tokens = max_tokens
        self.params = int(self.table.size)
        meta = json.loads((folder / STATIC_MARK).read_text())
        self.name, self.kind = str(meta.get("source", folder.name)), "static"

    def embed(self, texts: Sequence[str]) -> Any:
        np = self.np
        out = np.zeros((len(texts), self.table.shape[1]), dtype=np.float32)
        for i, enc in enumerate(self.tokenizer.encode_batch(list(texts), add_special_tokens=False)):
            ids = enc.ids[: self.max_tokens]
            if ids:
                out[i] = self.table[ids].mean(axis=0)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)


def distill_static(folder: Path, out: Path, *, dims: int = 256, batch: int = 512) -> Path:
    """Distil a static model from a transformer folder, as model2vec does: every vocabulary token's
    output vector through the transformer, PCA to ``dims``, Zipf weighting (``log(1 + rank)``).

    model2vec's own ``distill`` needs a newer transformers than this project pins; this is its
    recipe on the transformers installed, written in its layout.
    """
    import numpy as np
    from safetensors.numpy import save_file

    _check_folder(folder, "embedding model")
    torch, tf = _transformers()
    tok, model = _load(folder, "embedding model", tf.AutoTokenizer, tf.AutoModel)
    vocab = len(tok)
    special = set(tok.all_special_ids)
    cls = tok.cls_token_id if tok.cls_token_id is not None else tok.bos_token_id
    sep = tok.sep_token_id if tok.sep_token_id is not None else tok.eos_token_id
    rows = []
    with torch.inference_mode():
        for at in range(0, vocab, batch):
            ids = torch.arange(at, min(vocab, at + batch)).unsqueeze(1)
            parts = [ids]
            if cls is not None:
                parts.insert(0, torch.full_like(ids, cls))
            if sep is not None:
                parts.append(torch.full_like(ids, sep))
            hidden = model(input_ids=torch.cat(parts, dim=1)).last_hidden_state
            rows.append(hidden.mean(dim=1).float().numpy())
    emb = np.concatenate(rows)
    emb -= emb.mean(axis=0, keepdims=True)
    dims = min(dims, emb.shape[1], emb.shape[0])
    _, _, vt = np.linalg.svd(emb, full_matrices=False)
    emb = emb @ vt[:dims].T
    emb *= np.log1p(np.arange(1, len(emb) + 1, dtype=np.float32))[:, None]
    for sid in special:
        if 0 <= sid < len(emb):
            emb[sid] = 0.0
    out.mkdir(parents=True, exist_ok=True)
    save_file({"embeddings": emb.astype(np.float32)}, str(out / STATIC_WEIGHTS))
    tok.backend_tokenizer.save(str(out / "tokenizer.json"))
    meta = {"source": folder.name, "dims": dims, "vocab": len(emb), "recipe": "model2vec (PCA + Zipf)"}
    (out / STATIC_MARK).write_text(json.dumps(meta))
    (out / "config.json").write_text(json.dumps({"model_type": "model2vec", "hidden_dim": dims, **meta}))
    return out


def load_encoder(folder: Path) -> Any:
    """The encoder a folder holds: a static model when it is one, else the transformer."""
    return StaticEncoder(folder) if (folder / STATIC_MARK).is_file() else Encoder(folder)


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
