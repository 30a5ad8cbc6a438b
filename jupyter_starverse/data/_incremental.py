"""Signatures kept beside a deduplicated version, so a new batch is checked against them.

A dedup that publishes a version also writes ``_starverse/dedup/`` there: the stage
configuration, the sorted bucket files (band keys, exact hashes, paragraph hashes) of the
documents it kept, and the spilled normalized texts and snippets (for the exact Jaccard and
the report), every document numbered by its place in the version's ``data.jsonl``.

``data dedup NEW --against CLEAN`` numbers the new documents after the clean version's,
merges each bucket partition of the old files with the new records (stage 2), makes pairs
only where the later document is new (stage 3), decides only for new documents (stage 4),
and writes the clean version followed by the kept new documents; the old signatures are
read, never recomputed. A semantic dedup also keeps ``sem/``: the kept documents' vectors
(renumbered like the signatures), the encoder's id and the centroids, so a later
``--against --semantic`` with the same encoder embeds only the new batch (:func:`._semantic.attach_old`).
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
    _keep_vectors(stages / "sem", dest / "sem", remap)
    (dest / "meta.json").write_text(json.dumps({"docs": docs, "files": k}))
    return docs


def _keep_vectors(sem: Path, dest: Path, remap: Any, *, rows: int = 1 << 14) -> None:
    """The kept documents' vectors of a semantic run as one shard of ``dest``, with the encoder and centroids."""
    import numpy as np

    from ._semantic import OLD_RANK

    metas = sorted(sem.glob("embed-*.json")) if sem.is_dir() else []
    infos = [json.loads(m.read_text()) for m in metas]
    used = [(m, i) for m, i in zip(metas, infos, strict=True) if i.get("docs")]
    if not used or len({i.get("encoder") for _, i in used}) != 1:
        return
    dim, encoder = int(used[0][1]["dim"]), used[0][1].get("encoder")
    dest.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(dest / ".vec.tmp", "wb") as vf, open(dest / ".ids.tmp", "wb") as idf:
        for meta, _info in used:
            rank = meta.stem.split("-")[1]
            ids = np.memmap(sem / f"ids-{rank}.bin", dtype=np.int64, mode="r")
            vecs = np.memmap(sem / f"vec-{rank}.bin", dtype=np.float32, mode="r").reshape(-1, dim)
            for at in range(0, len(ids), rows):
                keep, new_ids = remap(np.asarray(ids[at : at + rows]))
                vf.write(np.asarray(vecs[at : at + rows])[keep].tobytes())
                idf.write(new_ids.astype(np.int64).tobytes())
                n += int(keep.sum())
    (dest / ".vec.tmp").replace(dest / f"vec-{OLD_RANK:04d}.bin")
    (dest / ".ids.tmp").replace(dest / f"ids-{OLD_RANK:04d}.bin")
    for name in ("centroids.npy", "centroids.json"):
        if (sem / name).is_file():
            shutil.copyfile(sem / name, dest / name)
    meta_out = {"docs": n, "seconds": 0.0, "dim": dim, "encoder": encoder}
    (dest / f"embed-{OLD_RANK:04d}.json").write_text(json.dumps(meta_out))
