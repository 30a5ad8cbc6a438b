"""Sharded data steps: what each rank of a job does, and the deterministic merge afterwards.

Inside the job (``python -m jupyter_starverse.data._shard`` through the job's script) every
rank reads the mounted dataset and takes the documents with ``idx % world == rank``; it
imports only :mod:`jupyter_starverse.runtime` and this package's pure modules (readers,
detectors, MinHash), never the facade. It writes its results under the shared output folder,
each file by temp + rename, and ``done-RANK.json`` last.

The merge reads the ranks' files in document order (a k-way merge on ``idx``), so the result
does not depend on how many ranks ran. For dedup the ranks run the five stages of
:mod:`._stages` (signatures per shard, bucket partitions, pairs, components on rank 0, filter
per shard), meeting at a file barrier between stages; no rank holds the corpus.
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ._pii import PII_TYPES, SUGGESTED, Deidentifier, find_pii, resolve_salt
from ._read import Doc, Malformed, list_files, read_docs
from ._steps import StepResult, _PiiTally, mask_text
from ._types import Example

__all__ = [
    "JOB_CODE",
    "main",
    "malformed_of",
    "merge_rows",
    "merge_rows_idx",
    "merge_tallies",
    "missing_ranks",
    "rank_figures",
]

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
    began = time.perf_counter()
    _peak_mib()  # the stage's peak starts here: after the imports, before its share is read
    start = _rss_mib()
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
        summary["stages"] = [{"stage": args.step, "wall_s": round(time.perf_counter() - began, 3),
                              "peak_rss_mib": _peak_mib(), "start_rss_mib": start, "docs": n}]  # fmt: skip
        summary["tally"] = _tally_json(tally, tally.firsts)
        summary["before_after"] = before_after
    elif args.step == "dedup":
        summary["stages"] = _dedup_stages(
            out, rank, world, docs, args.text_field, lambda: _shard_docs(args, rank, world), params
        )
        n = int(summary["stages"][0].get("docs", 0))
    else:
        raise SystemExit(f"unknown step {args.step!r}")
    summary["docs"] = n
    summary["malformed"] = [m.to_json() for m in malformed]
    _write_atomic(out / f"done-{rank}.json", json.dumps(summary, ensure_ascii=False))
    print(f"rank {rank}/{world}: {args.step} of {n} documents", flush=True)


def _barrier(out: Path, name: str, rank: int, world: int, *, timeout: float = 7 * 86400.0) -> None:
    """Wait until every rank has finished stage ``name`` (a marker file each); stop if one failed."""
    _write_atomic(out / f"barrier-{name}-{rank}", "")
    deadline = time.monotonic() + timeout
    while True:
        failed = sorted(out.glob("failed-*"))
        if failed:
            raise SystemExit(f"rank {rank}: {failed[0].name} failed: {failed[0].read_text(encoding='utf-8')[:500]}")
        if all((out / f"barrier-{name}-{r}").exists() for r in range(world)):
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"rank {rank}: gave up waiting for the other ranks after stage {name}")
        time.sleep(0.2)


def _status_mib(field: str) -> float | None:
    """A memory line of ``/proc/self/status`` (``VmRSS``, ``VmHWM``) in MiB; None where there is none."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            return round(next(int(line.split()[1]) for line in f if line.startswith(f"{field}:")) / 1024, 1)
    except (OSError, StopIteration, ValueError):
        return None


def _rss_mib() -> float:
    """This process's resident memory now, in MiB (0.0 where ``/proc`` is not there)."""
    return _status_mib("VmRSS") or 0.0


def _peak_mib() -> float:
    """This process's peak RSS in MiB since the last call, so that each stage reports its own peak and not
    the largest of the stages before it (the stages of a rank share one process). Linux keeps the peak as
    ``VmHWM`` and resets it through ``clear_refs``; elsewhere it is the process's peak (``ru_maxrss``)."""
    peak = _status_mib("VmHWM")
    if peak is None:
        import resource

        return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w", encoding="ascii") as f:
        f.write("5")
    return peak


def _dedup_stages(
    out: Path, rank: int, world: int, docs: Iterator[Doc], text_field: str, reread: Any, params: dict[str, Any]
) -> list[dict[str, Any]]:
    """The dedup stages on this rank: its shard, its semantic share, its partitions, rank 0 the components,
    its shard again. Returns this rank's figures per stage (wall seconds, the stage's own peak RSS)."""
    from jupyter_starverse import runtime

    from . import _stages as st

    work = out / "stages"
    cfg = st.StageConfig.load(work)
    figures: list[dict[str, Any]] = []
    clock = [time.perf_counter()]
    _peak_mib()
    start = [_rss_mib()]

    def done(stage: str, **extra: Any) -> None:
        now = time.perf_counter()
        peak = _peak_mib()
        figures.append({"stage": stage, "wall_s": round(now - clock[0], 3), "peak_rss_mib": peak,
                        "start_rss_mib": start[0], **extra})  # fmt: skip
        clock[0], start[0] = now, _rss_mib()

    against: Path | None = None
    offset = 0
    if params.get("against_mount"):
        from ._incremental import old_docs

        against = runtime.mount_path(str(params["against_mount"])) / "_starverse" / "dedup"
        offset = old_docs(against)
    encoder = None
    if params.get("semantic_model"):
        from ._models import load_encoder

        encoder = load_encoder(runtime.mount_path(str(params["semantic_model"])))
        encoder.ref = str(params["semantic_model"])
    try:
        stats = st.sign_shard(_with_offset(docs, offset), cfg, work, rank)
        done("signatures", docs=stats.docs)
        _barrier(out, "sign", rank, world)
        if encoder is not None:
            from . import _semantic as sem

            n, spent = sem.embed_shard(_with_offset(reread(), offset), encoder, work, rank)
            done("embed", docs=n, docs_per_s=round(n / spent, 1) if spent > 0 else 0.0)
            reused = False
            if rank == 0 and against is not None:  # the old version's kept vectors, or embedded once here
                from ._read import list_files, read_docs

                old_folder = str(runtime.mount_path(str(params["against_mount"])))
                reused = sem.prepare_old(
                    work, against, encoder, lambda: read_docs(list_files(old_folder), text_field=text_field)
                )
                done("old vectors")
            _barrier(out, "embed", rank, world)
            if rank == 0 and not reused:
                total = offset + sum(s.docs for s in st.shard_stats(work))
                sem.train_centroids(work, int(params.get("semantic_clusters") or 0) or sem.default_clusters(total))
                done("k-means")
            _barrier(out, "centroids", rank, world)
            k = int(json.loads((work / "sem" / "centroids.json").read_text())["k"])
            if k:
                groups = sem.groups_for(cfg, k)
                sem.assign_shard(work, rank, groups)
                if rank == 0 and against is not None:
                    sem.assign_shard(work, sem.OLD_RANK, groups)
                _barrier(out, "assign", rank, world)
                dim = sem.embed_dim(work)
                for g in range(rank, groups, world):
                    sem.group_pairs(cfg, work, g, dim=dim, new_from=offset)
            done("semantic pairs")
        for p in range(rank, cfg.partitions, world):
            st.sort_partition(cfg, work, p, extra=against / "buckets" if against is not None else None)
            st.partition_pairs(cfg, work, p, old=against / "sig" if against is not None else None, new_from=offset)
        done("buckets, pairs")
        _barrier(out, "pairs", rank, world)
        if rank == 0:
            total = offset + sum(s.docs for s in st.shard_stats(work))
            st.components(cfg, work, total, new_from=offset, start=offset)
            done("components")
        _barrier(out, "components", rank, world)
        rows_path = out / f"rows-{rank}.jsonl"
        tmp = rows_path.with_name(f".{rows_path.name}.tmp")
        with open(tmp, "w", encoding="utf-8") as rows:

            def write(doc: Doc, text: str) -> None:
                row = dict(doc.row)
                row[text_field] = text
                rows.write(json.dumps({"i": doc.idx, "row": row}, ensure_ascii=False, default=str) + "\n")

            kept = st.filter_shard(_with_offset(reread(), offset), cfg, work, write)
        tmp.replace(rows_path)
        done("filter", docs=kept)
    except BaseException as e:
        if not isinstance(e, SystemExit):
            _write_atomic(out / f"failed-{rank}", f"{type(e).__name__}: {e}")
        raise
    return figures


def _with_offset(docs: Iterator[Doc], offset: int) -> Iterator[Doc]:
    """A new batch's documents numbered after the clean version's (``--against``)."""
    if not offset:
        return docs
    return (Doc(d.idx + offset, d.file, d.line, d.text, d.row) for d in docs)


def _shard_docs(args: argparse.Namespace, rank: int, world: int) -> Iterator[Doc]:
    from jupyter_starverse import runtime

    source = list_files(str(runtime.mount_path(args.mount)))
    return (d for d in read_docs(source, text_field=args.text_field) if d.idx % world == rank)


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
    for row, _ in merge_rows_idx(out, world):
        yield row


def merge_rows_idx(out: Path, world: int) -> Iterator[tuple[dict[str, Any] | None, int]]:
    """The ranks' output rows in document order, each with its document number."""
    files = [open(out / f"rows-{r}.jsonl", encoding="utf-8") for r in range(world)]  # noqa: SIM115
    try:
        streams = [(json.loads(line) for line in f) for f in files]
        for item in heapq.merge(*streams, key=lambda x: int(x["i"])):
            yield item["row"], int(item["i"])
    finally:
        for f in files:
            f.close()


def rank_figures(out: Path, world: int) -> list[dict[str, Any]]:
    """Each rank's documents and per-stage figures (wall seconds, peak RSS), from its ``done`` file."""
    return [
        {"rank": int(s.get("rank", r)), "docs": int(s.get("docs", 0)), "stages": list(s.get("stages", []))}
        for r, s in enumerate(_summaries(out, world))
    ]


def malformed_of(out: Path) -> list[dict[str, Any]]:
    """Rank 0's malformed lines (every rank reads every line; rank 0 reports them)."""
    return list(json.loads((out / "done-0.json").read_text(encoding="utf-8"))["malformed"])
