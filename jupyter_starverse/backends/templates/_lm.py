"""A tiny character-level transformer LM, its data and the arguments shared by the template scripts.

Every template builds the same model from ``torch.manual_seed(0)`` (so ddp, fsdp, tp and pp
start from the same weights) and trains on the same batch plan: the global batch is fixed on the
first run and kept on a resume onto another layout (``runtime.keep_global_batch``).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["FALLBACK_TEXT", "CharData", "TinyLM", "lm_loss", "load_text", "template_args"]


def template_args(doc: str | None = None) -> argparse.Namespace:
    """The arguments every template takes (``--batch`` is the micro batch per data-parallel rank)."""
    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("--data", default=None, help="catalog dataset mounted with --mount")
    parser.add_argument("--batch", type=int, default=16, help="micro batch: sequences per rank per forward")
    parser.add_argument(
        "--global-batch",
        type=int,
        default=None,
        help="sequences per optimizer step (default batch x ranks), kept on resume",
    )
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--step-sleep", type=float, default=0.0, help="slow each step down (tests)")
    return parser.parse_args()


def lm_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean next-character cross entropy of a batch."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


FALLBACK_TEXT = (
    "the quick brown fox jumps over the lazy dog. "
    "a small model learns the shape of the text it reads. "
    "every rank sees its own slice of the data and the gradients are averaged. "
) * 40


def load_text(folder: Path | None) -> str:
    """All ``*.txt`` files of a mounted dataset folder, or a built-in text."""
    if folder is None:
        return FALLBACK_TEXT
    parts = [p.read_text(errors="replace") for p in sorted(Path(folder).rglob("*.txt"))]
    return "".join(parts) or FALLBACK_TEXT


class CharData:
    """Random windows of a text, encoded per character; each rank draws its own."""

    def __init__(self, text: str, *, seq_len: int, seed: int) -> None:
        self.chars = sorted(set(text))
        index = {c: i for i, c in enumerate(self.chars)}
        self.data = torch.tensor([index[c] for c in text], dtype=torch.long)
        self.seq_len = seq_len
        self.gen = torch.Generator().manual_seed(seed)

    @property
    def vocab(self) -> int:
        return len(self.chars)

    def batch(self, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        starts = torch.randint(0, len(self.data) - self.seq_len - 1, (size,), generator=self.gen)
        x = torch.stack([self.data[s : s + self.seq_len] for s in starts.tolist()])
        y = torch.stack([self.data[s + 1 : s + 1 + self.seq_len] for s in starts.tolist()])
        return x, y


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        out: torch.Tensor = x + self.mlp(self.ln2(x))
        return out


class TinyLM(nn.Module):
    """Decoder-only transformer: embeddings, ``layers`` blocks, tied output head."""

    def __init__(self, vocab: int, *, dim: int = 64, heads: int = 4, layers: int = 2, seq_len: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.zeros(seq_len, dim))
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        nn.init.normal_(self.pos, std=1 / math.sqrt(dim))
        self.dim, self.layers, self.seq_len = dim, layers, seq_len

    def flops_per_token(self) -> float:
        """Training FLOPs per token of the full model (``runtime.train_flops_per_token``): counted
        before any split, so ddp, fsdp, tp and pp report the same model FLOPs."""
        from jupyter_starverse.runtime import train_flops_per_token

        params = sum(p.numel() for n, p in self.named_parameters() if not n.startswith(("embed", "pos")))
        return train_flops_per_token(params, layers=self.layers, hidden=self.dim, seq_len=self.seq_len)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        mask = torch.triu(torch.full((t, t), float("-inf"), device=x.device), diagonal=1)
        h = self.embed(x) + self.pos[:t]
        for block in self.blocks:
            h = block(h, mask)
        out: torch.Tensor = self.head(self.ln(h))
        return out
