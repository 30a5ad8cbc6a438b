"""Signatures kept beside a deduplicated version, so a new batch is checked against them.

A dedup that publishes a version also writes ``_starverse/dedup/`` there: the stage
configuration, the sorted bucket files (band keys, exact hashes, paragraph hashes) of the
documents it kept, and the spilled normalized texts and snippets (for the exact Jaccard and
the report), every document numbered by its place in the version's ``data.jsonl``.

``data dedup NEW --against CLEAN`` numbers the new documents after the clean version's,
merges each bucket partition of the old files with the new records (stage 2), makes pairs
only where the later document is new (stage 3), decides only for new documents (stage 4),
and writes the clean version followed by the kept new documents; the old signatures are
read, never recomputed.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

from jupyter_starverse.errors import BadInputError

from ._stages import _COLS, StageConfig, _decision_dtype, _key_dtype, _preg_dtype

__all__ = ["FOLDER", "keep_beside", "old_config", "old_docs", "require"]

FOLDER = "dedup"  # under the version's _starverse/


def require(version_folder: Path, label: str) -> Path:
    """The kept dedup folder of a version, or an error saying how to get one."""
    folder = version_folder / "_starverse" / FOLDER
    if not (folder / "meta.json").is_file():
        raise BadInputError(
            f"{label} keeps no dedup signatures to compare a new batch against",
            field="against",
            hint=f"dedup it once (`starverse data dedup {label}`): the version that writes keeps them",
        )
    return folder


def old_config(against: Path, params: Any) -> StageConfig:
    """The clean version's stage configuration; thresholds from ``params``, signature settings from it."""
    cfg = StageConfig.load(against)
    return replace(
        cfg,
        threshold=params.threshold,
        paragraph_share=params.paragraph_share,
        boilerplate_docs=params.boilerplate_docs,
        semantic_threshold=params.semantic_threshold,
    )


def old_docs(against: Path) -> int:
    return int(json.loads((against / "meta.json").read_text())["docs"])


def _link(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def keep_beside(stages: Path, dest: Path, *, against: Path | None = None) -> int:
    """Write ``dest`` (a version's dedup folder) from a finished run's stage files; returns its documents.

    Removed documents are dropped and the others renumbered by their place in the output; one
    partition (or one shard's offsets) is in memory at a time.
    """
    import numpy as np

    dest.mkdir(parents=True, exist_ok=True)
    (dest / "sig").mkdir(exist_ok=True)
    (dest / "buckets").mkdir(exist_ok=True)
    cfg = StageConfig.load(stages)
    cfg.save(dest)
    path = stages / "decisions.bin"
    gone = np.fromfile(path, dtype=_decision_dtype())["doc"] if path.stat().st_size else np.zeros(0, np.int64)

    def remap(ids: Any) -> tuple[Any, Any]:
        keep = ~np.isin(ids, gone)
        return keep, ids[keep] - np.searchsorted(gone, ids[keep])

    for kind, dtype in (("band", _key_dtype()), ("exact", _key_dtype()), ("para", _preg_dtype())):
        for p in range(cfg.partitions):
            src = stages / "buckets" / f"{kind}-{p:04d}.bin"
            rec = np.fromfile(src, dtype=dtype) if src.is_file() else np.zeros(0, dtype)
            keep, ids = remap(rec["doc"])
            rec = rec[keep]
            rec["doc"] = ids
            rec.tofile(dest / "buckets" / f"{kind}-{p:04d}.bin")
    k = 0
    docs = 0
    folders = [stages / "sig", *([against / "sig"] if against is not None else [])]
    for folder in folders:
        for off in sorted(folder.glob("offsets-*.bin")):
            idx = np.fromfile(off, dtype=np.int64).reshape(-1, _COLS)
            keep, ids = remap(idx[:, 0])
            idx = idx[keep]
            idx[:, 0] = ids
            idx.tofile(dest / "sig" / f"offsets-{k:04d}.bin")
            for part in ("texts", "snips"):
                _link(off.with_name(off.name.replace("offsets-", f"{part}-")), dest / "sig" / f"{part}-{k:04d}.bin")
            docs += len(idx)
            k += 1
    (dest / "meta.json").write_text(json.dumps({"docs": docs, "files": k}))
    return docs
