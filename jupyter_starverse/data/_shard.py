"""Sharded data steps: what each rank of a job does, and the deterministic merge afterwards.

Inside the job (``python -m jupyter_starverse.data._shard`` through the job's script) every
rank reads the mounted dataset and takes the documents with ``idx % world == rank``; it
imports only :mod:`jupyter_starverse.runtime` and this package's pure modules (readers,
detectors, MinHash), never the facade. It writes its results under the shared output folder,
each file by temp + rename, and ``done-RANK.json`` last.

The merge reads the ranks' files in document order (a k-way merge on ``idx``), so the result
does not depend on how many ranks ran. For dedup the ranks compute the expensive part (shingles,
signatures, exact hashes); the banding, Jaccard verification and the paragraph rule then see
every shard at once, so duplicates across shards are found.
"""

from __future__ import annotations

import argparse
import heapq
import json
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ._minhash import MinHasher
from ._pii import PII_TYPES, SUGGESTED, Deidentifier, find_pii, resolve_salt
from ._read import Doc, Malformed, list_files, read_docs
from ._steps import StepResult, _PiiTally, mask_text, sign
from ._types import Example

__all__ = ["JOB_CODE", "main", "merge_dedup_signed", "merge_rows", "merge_tallies", "missing_ranks"]

#: The job's script: a notebook-cell-sized entry point (the job runs it with the worker).
JOB_CODE = "from jupyter_starverse.data._shard import main\n\nmain()\n"


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _tally_json(tally: _PiiTally, firsts: dict[str, list[int]]) -> dict[str, Any]:
    return {
        "count": dict(tally.count),
        "docs": dict(tally.docs),
        "examples": {
            t: [[idx, e.where, e.before, e.after, e.note] for idx, e in zip(firsts[t], ex, strict=True)]
            for t, ex in tally.examples.items()
        },
    }


class _IdxTally(_PiiTally):
    """A tally that remembers which document each example came from (to merge in order)."""

    def __init__(self, actions: dict[str, str], examples: int) -> None:
        super().__init__(actions, examples)
        self.firsts: dict[str, list[int]] = {t: [] for t in PII_TYPES}

    def add_doc(self, doc: Doc, findings: list[Any], after: Any = None) -> None:
        before = {t: len(self.examples[t]) for t in PII_TYPES}
        self.add(doc, findings, after)
        for t in PII_TYPES:
            self.firsts[t] += [doc.idx] * (len(self.examples[t]) - before[t])


def _job(args: argparse.Namespace) -> None:
    from jupyter_starverse import runtime

    rank, world = runtime.rank(), runtime.world_size()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    params = json.loads(args.params)
    source = list_files(str(runtime.mount_path(args.mount)))
    malformed: list[Malformed] = []
    docs = (
        d
        for d in read_docs(source, text_field=args.text_field, report=malformed.append if rank == 0 else None)
        if d.idx % world == rank
    )
    n = 0
    summary: dict[str, Any] = {"rank": rank, "world": world}
    if args.step in ("scan", "clean"):
        deid = (
            Deidentifier(params.get("actions"), salt=resolve_salt(params.get("salt"))) if args.step == "clean" else None
        )
        types = tuple(params.get("types") or PII_TYPES) if deid is None else deid.types
        tally = _IdxTally(dict(deid.actions) if deid else dict(SUGGESTED), int(params.get("examples", 3)))
        rows_path = out / f"rows-{rank}.jsonl"
        rows_tmp = rows_path.with_name(f".{rows_path.name}.tmp")
        before_after: list[list[Any]] = []
        with open(rows_tmp, "w", encoding="utf-8") as rows:
            for doc in docs:
                n += 1
                findings = find_pii(doc.text, types)
                if deid is None:
                    tally.add_doc(doc, findings)
                    continue
                text, acted = deid.apply(doc.text, findings)
                tally.add_doc(doc, acted, lambda f: deid.replacement(f))
                row = None
                if text is not None:
                    row = dict(doc.row)
                    row[args.text_field] = text
                    if acted and len(before_after) < tally.limit:
                        before_after.append([doc.idx, doc.where, mask_text(doc.text), mask_text(text), len(acted)])
                rows.write(json.dumps({"i": doc.idx, "row": row}, ensure_ascii=False, default=str) + "\n")
        rows_tmp.replace(rows_path)
        summary["tally"] = _tally_json(tally, tally.firsts)
        summary["before_after"] = before_after
    elif args.step == "dedup":
        hasher = MinHasher(num_perm=int(params.get("num_perm", 128)), ngram=int(params.get("ngram", 5)))
        path = out / f"signed-{rank}.bin"
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "wb") as f:
            for idx, norm, digest, signature in sign(iter(docs), hasher):
                n += 1
                data = norm.encode("utf-8")
                f.write(struct.pack("<qI", idx, len(data)) + digest + signature.tobytes() + data)
        tmp.replace(path)
        summary["num_perm"] = hasher.num_perm
    else:
        raise SystemExit(f"unknown step {args.step!r}")
    summary["docs"] = n
    summary["malformed"] = [m.to_json() for m in malformed]
    _write_atomic(out / f"done-{rank}.json", json.dumps(summary, ensure_ascii=False))
    print(f"rank {rank}/{world}: {args.step} of {n} documents", flush=True)


def main(argv: list[str] | None = None) -> None:
    """The job's entry point (its arguments come from the JobSpec)."""
    parser = argparse.ArgumentParser(prog="starverse-data-shard")
    parser.add_argument("--step", required=True)
    parser.add_argument("--mount", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--text-field", default="text")
    parser.add_argument("--params", default="{}")
    _job(parser.parse_args(sys.argv[1:] if argv is None else argv))


# -- merge (in the process that launched the job) ---------------------------------------------
def missing_ranks(out: Path, world: int) -> list[int]:
    return [r for r in range(world) if not (out / f"done-{r}.json").is_file()]


def _summaries(out: Path, world: int) -> list[dict[str, Any]]:
    return [json.loads((out / f"done-{r}.json").read_text(encoding="utf-8")) for r in range(world)]


def merge_tallies(
    out: Path, world: int, res: StepResult, actions: dict[str, str], examples: int
) -> list[dict[str, Any]]:
    """Counts summed, examples the first ones in document order; returns rank 0's malformed lines."""
    from ._pii import WHY
    from ._types import PiiType

    summaries = _summaries(out, world)
    count: dict[str, int] = {}
    docs: dict[str, int] = {}
    shown: dict[str, list[list[Any]]] = {}
    for s in summaries:
        res.docs_in += int(s["docs"])
        for t, c in s["tally"]["count"].items():
            count[t] = count.get(t, 0) + int(c)
        for t, c in s["tally"]["docs"].items():
            docs[t] = docs.get(t, 0) + int(c)
        for t, ex in s["tally"]["examples"].items():
            shown.setdefault(t, []).extend(ex)
    res.pii = [
        PiiType(
            t,
            count[t],
            docs.get(t, 0),
            actions[t],
            SUGGESTED[t],
            WHY[actions[t]],
            tuple(
                Example(w, b, a, note) for _, w, b, a, note in sorted(shown.get(t, []), key=lambda e: e[0])[:examples]
            ),
        )
        for t in PII_TYPES
        if count.get(t)
    ]
    pairs = sorted((ba for s in summaries for ba in s.get("before_after", [])), key=lambda e: e[0])[:examples]
    res.examples = [Example(w, b, a, f"{k} values") for _, w, b, a, k in pairs]
    return list(summaries[0]["malformed"])


def merge_rows(out: Path, world: int) -> Iterator[dict[str, Any] | None]:
    """The ranks' output rows in document order (None: a dropped document)."""
    files = [open(out / f"rows-{r}.jsonl", encoding="utf-8") for r in range(world)]  # noqa: SIM115
    try:
        streams = [(json.loads(line) for line in f) for f in files]
        for item in heapq.merge(*streams, key=lambda x: int(x["i"])):
            yield item["row"]
    finally:
        for f in files:
            f.close()


def _signed(path: Path, num_perm: int) -> Iterator[tuple[int, str, bytes, Any]]:
    import numpy as np

    head = struct.calcsize("<qI")
    with open(path, "rb") as f:
        while True:
            raw = f.read(head)
            if not raw:
                return
            idx, size = struct.unpack("<qI", raw)
            digest = f.read(12)
            signature = np.frombuffer(f.read(4 * num_perm), dtype=np.uint32)
            yield idx, f.read(size).decode("utf-8"), digest, signature


def merge_dedup_signed(out: Path, world: int) -> tuple[Iterator[tuple[int, str, bytes, Any]], list[dict[str, Any]]]:
    """Every rank's (doc, text, exact hash, signature) in document order, and rank 0's malformed lines."""
    summaries = _summaries(out, world)
    num_perm = int(summaries[0]["num_perm"])
    streams = [_signed(out / f"signed-{r}.bin", num_perm) for r in range(world)]
    return heapq.merge(*streams, key=lambda x: x[0]), list(summaries[0]["malformed"])
