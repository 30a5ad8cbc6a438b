"""Megatron-LM: pre-tokenize text into its indexed dataset (``.bin``/``.idx``) on CPU, and render
``pretrain_gpt.py`` arguments for a Megatron container image.

The ``.idx`` layout is megatron-core's ``IndexedDataset`` (version 1): the header
``MMIDIDX\\x00\\x00``, ``<Q`` version 1, ``<B`` dtype code, ``<Q`` sequence count, ``<Q``
document count, then the sequence lengths (int32), the sequence byte offsets into ``.bin``
(int64) and the document indices (int64, starting at 0). Written here with the standard
library (megatron-core is not needed to prepare data; its forward needs CUDA anyway).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_starverse.errors import BadInputError
from jupyter_starverse.jobmodel import JobSpec

from ._model import Recipe, RecipeStore

__all__ = ["DTYPE_CODES", "IndexedDataset", "megatron_args", "megatron_spec", "read_index", "write_indexed_dataset"]

_HEADER = b"MMIDIDX\x00\x00"
#: megatron-core's dtype codes: (code, struct format, bytes)
DTYPE_CODES = {"uint8": (1, "B", 1), "int32": (4, "i", 4), "int64": (5, "q", 8), "uint16": (8, "H", 2)}
_MAX_ID = {"uint8": 255, "uint16": 65535, "int32": 2**31 - 1, "int64": 2**63 - 1}
PREFIX = "text_document"  # Megatron's customary name: --data-path DIR/text_document


@dataclass(frozen=True)
class IndexedDataset:
    """What an ``.idx`` file says: dtype, sequence lengths, byte offsets, document indices."""

    dtype: str
    lengths: tuple[int, ...]
    pointers: tuple[int, ...]
    documents: tuple[int, ...]

    def tokens(self, bin_path: Path, i: int) -> list[int]:
        """The token ids of sequence ``i``, read from the ``.bin`` file."""
        _, fmt, size = DTYPE_CODES[self.dtype]
        with bin_path.open("rb") as f:
            f.seek(self.pointers[i])
            data = f.read(self.lengths[i] * size)
        return list(struct.unpack(f"<{self.lengths[i]}{fmt}", data))


def _dtype_for(vocab_size: int) -> str:
    return "uint16" if vocab_size < 65500 else "int32"


def write_indexed_dataset(documents: Iterable[Sequence[int]], prefix: Path, *, vocab_size: int) -> IndexedDataset:
    """Write token-id documents as ``prefix.bin`` + ``prefix.idx`` (temp files renamed at the end)."""
    dtype = _dtype_for(vocab_size)
    _, fmt, size = DTYPE_CODES[dtype]
    prefix.parent.mkdir(parents=True, exist_ok=True)
    bin_tmp = prefix.with_name(f".{prefix.name}.bin.{os.getpid()}.tmp")
    idx_tmp = prefix.with_name(f".{prefix.name}.idx.{os.getpid()}.tmp")
    lengths: list[int] = []
    pointers: list[int] = []
    offset = 0
    try:
        with bin_tmp.open("wb") as out:
            for doc in documents:
                ids = list(doc)
                if not ids:
                    continue
                if max(ids) > _MAX_ID[dtype] or min(ids) < 0:
                    raise BadInputError(f"token id out of range for {dtype}", field="data")
                out.write(struct.pack(f"<{len(ids)}{fmt}", *ids))
                pointers.append(offset)
                lengths.append(len(ids))
                offset += len(ids) * size
        if not lengths:
            raise BadInputError("no text to pre-tokenize", field="data", hint="the dataset holds *.txt or jsonl text")
        documents_idx = list(range(len(lengths) + 1))  # one document per sequence; starts at 0
        with idx_tmp.open("wb") as f:
            f.write(_HEADER)
            f.write(struct.pack("<Q", 1))
            f.write(struct.pack("<B", DTYPE_CODES[dtype][0]))
            f.write(struct.pack("<Q", len(lengths)))
            f.write(struct.pack("<Q", len(documents_idx)))
            f.write(struct.pack(f"<{len(lengths)}i", *lengths))
            f.write(struct.pack(f"<{len(pointers)}q", *pointers))
            f.write(struct.pack(f"<{len(documents_idx)}q", *documents_idx))
        bin_tmp.replace(prefix.with_suffix(".bin"))
        idx_tmp.replace(prefix.with_suffix(".idx"))
    finally:
        bin_tmp.unlink(missing_ok=True)
        idx_tmp.unlink(missing_ok=True)
    return IndexedDataset(dtype, tuple(lengths), tuple(pointers), tuple(documents_idx))


def read_index(idx_path: Path) -> IndexedDataset:
    """Parse an ``.idx`` file (ours or megatron-core's)."""
    data = idx_path.read_bytes()
    if not data.startswith(_HEADER):
        raise BadInputError(f"{idx_path.name} is not a Megatron index (bad header)", field="data")
    pos = len(_HEADER)
    (version,) = struct.unpack_from("<Q", data, pos)
    (code,) = struct.unpack_from("<B", data, pos + 8)
    count, docs = struct.unpack_from("<QQ", data, pos + 9)
    pos += 25
    lengths = struct.unpack_from(f"<{count}i", data, pos)
    pointers = struct.unpack_from(f"<{count}q", data, pos + 4 * count)
    documents = struct.unpack_from(f"<{docs}q", data, pos + 12 * count)
    dtype = next(name for name, (c, _, _) in DTYPE_CODES.items() if c == code)
    if version != 1:
        raise BadInputError(f"{idx_path.name}: index version {version} is not 1", field="data")
    return IndexedDataset(dtype, tuple(lengths), tuple(pointers), tuple(documents))


def pretokenize(folder: Path, model_dir: Path, out: Path) -> IndexedDataset:
    """Tokenize every text of ``folder`` (``*.txt``, ``{"text"}`` lines) with the model's tokenizer, one
    document each with an end-of-document token, into ``out/text_document.{bin,idx}``."""
    from transformers import AutoTokenizer

    from .train._data import _texts

    tok = AutoTokenizer.from_pretrained(model_dir)
    eod = tok.eos_token_id
    docs = (
        list(tok(t, add_special_tokens=False)["input_ids"]) + ([eod] if eod is not None else []) for t in _texts(folder)
    )
    return write_indexed_dataset(docs, out / PREFIX, vocab_size=len(tok))


def megatron_args(values: dict[str, Any], config: dict[str, Any], *, data_prefix: str, tokenizer: str) -> list[str]:
    """``pretrain_gpt.py`` arguments for the model's shape and the recipe's schedule (bf16, cosine decay).

    Parallel sizes, checkpoints and TensorBoard come from the job (``backends.templates.megatron_args``).
    """
    heads = int(config.get("num_attention_heads", 1))
    args = [
        "--num-layers",
        str(config.get("num_hidden_layers")),
        "--hidden-size",
        str(config.get("hidden_size")),
        "--ffn-hidden-size",
        str(config.get("intermediate_size")),
        "--num-attention-heads",
        str(heads),
        "--seq-length",
        str(values["seq_len"]),
        "--max-position-embeddings",
        str(max(int(config.get("max_position_embeddings", 0)), values["seq_len"])),
        "--micro-batch-size",
        str(values["micro_batch"]),
        "--global-batch-size",
        str(values["global_batch"]),
        "--lr",
        str(values["lr"]),
        "--min-lr",
        str(values["lr"] * values["min_lr_ratio"]),
        "--lr-decay-style",
        "cosine",
        "--lr-warmup-iters",
        str(values["warmup_steps"]),
        "--lr-decay-iters",
        str(values["steps"]),
        "--weight-decay",
        str(values["weight_decay"]),
        "--clip-grad",
        str(values["max_grad_norm"]),
        "--data-path",
        data_prefix,
        "--split",
        "100,0,0",
        "--tokenizer-type",
        "HuggingFaceTokenizer",
        "--tokenizer-model",
        tokenizer,
        "--log-interval",
        "1",
        "--log-throughput",
    ]
    kv = config.get("num_key_value_heads")
    if kv and int(kv) != heads:
        args += ["--group-query-attention", "--num-query-groups", str(kv)]
    if values.get("precision", "auto") in ("auto", "bf16"):
        args.append("--bf16")
    elif values["precision"] == "fp16":
        args.append("--fp16")
    return args


def megatron_spec(
    service: RecipeStore,
    recipe: Recipe,
    *,
    model: str,
    data: tuple[str, ...],
    values: dict[str, Any],
    name: str | None,
    **job: Any,
) -> JobSpec:
    """A Megatron-LM job: ``python pretrain_gpt.py ARGS`` in a Megatron image, on GPUs.

    ``data`` is a store dataset that :meth:`RecipeService.pretokenize` wrote (``text_document.{bin,idx}``).
    The backend adds the parallel sizes, checkpoint and TensorBoard arguments (``framework=megatron``)
    and refuses CPU jobs with a clear error: Megatron's kernels are CUDA-only.
    """
    import json

    if len(data) != 1:
        raise BadInputError(
            "Megatron takes one pre-tokenized dataset",
            field="data",
            hint="pre-tokenize with `client.recipes.pretokenize(DATASET, model=...)`",
        )
    folder = service.catalog.mount(data[0])
    if not (folder / f"{PREFIX}.idx").is_file():
        raise BadInputError(
            f"{data[0]} holds no Megatron index ({PREFIX}.idx)",
            field="data",
            hint="pre-tokenize it first: client.recipes.pretokenize(DATASET, model=MODEL)",
        )
    model_dir = service.catalog.mount(model)
    config = json.loads((model_dir / "config.json").read_text())
    argv = megatron_args(values, config, data_prefix=str(folder / PREFIX), tokenizer=str(model_dir))
    script = str(job.pop("megatron_script", "/workspace/megatron-lm/pretrain_gpt.py"))
    mounts = tuple(dict.fromkeys([model, *data, *job.pop("mounts", ())]))
    return JobSpec(
        name=name or recipe.name,
        command=("python", script, *argv),
        framework="megatron",
        mounts=mounts,
        steps=values["steps"],
        **job,
    )
