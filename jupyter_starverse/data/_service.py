"""The data preparation service: every step reads a store dataset and writes a NEW version.

A step reads ``NAME[@VERSION]`` (pulled first if needed) or a folder/fsspec URL, runs, and
publishes its output as a new version of a dataset in the catalog (the source is never
touched). The version folder holds ``data.jsonl`` and ``_starverse/`` with the report (JSON
and HTML) and the provenance: every step since the raw data, with its parameters and counts.
Reports are also kept under ``prepared/_reports`` on the store for listing.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from jupyter_starverse._format import format_bytes
from jupyter_starverse._inputs import check_path, check_text
from jupyter_starverse._settings import Settings
from jupyter_starverse.catalog import Catalog, DatasetRef, check_source, parse_ref
from jupyter_starverse.errors import BadInputError, ConflictError, NotFoundError, StoreError
from jupyter_starverse.jobmodel import Job, JobSpec, JobState

from . import _steps
from ._html import report_html
from ._pii import PII_TYPES, SUGGESTED, Deidentifier, find_pii, resolve_salt
from ._progress import Progress, ProgressMeter
from ._read import ORIGINS, Doc, Malformed, Source, list_files, origin_line, read_docs
from ._shard import JOB_CODE, malformed_of, merge_rows, merge_rows_idx, merge_tallies, missing_ranks, rank_figures
from ._types import DataReport, ReportList, StepEstimate, clip

__all__ = ["DataPrep"]

Say = Callable[[str], None]
STEPS = ("scan", "clean", "dedup", "score")
_MALFORMED_SHOWN = 100
_SAMPLE = 200
#: Longest name of the text field (a JSON key or a CSV column); it is repeated in the report.
MAX_FIELD = 256


class _Input:
    def __init__(self, label: str, source: Source, provenance: list[dict[str, Any]], ref: DatasetRef | None) -> None:
        self.label, self.source, self.provenance, self.ref = label, source, provenance, ref


class DataPrep:
    """Scan, clean, dedup and score datasets of the store.

    Parameters
    ----------
    settings
        The workspace settings (the store).
    catalog
        The store's catalog: where inputs come from and outputs are published.
    submit, wait
        Launch a job and wait for it (the facade's); needed only for sharded runs
        (``shards=(nodes, procs_per_node)``), which run the per-document work as a job.
    """

    def __init__(
        self,
        settings: Settings,
        catalog: Catalog,
        *,
        submit: Callable[[JobSpec], Job] | None = None,
        wait: Callable[[Job, float | None], Job] | None = None,
    ) -> None:
        self.settings = settings
        self.catalog = catalog
        self._submit = submit
        self._wait = wait

    # -- places ------------------------------------------------------------------------
    @property
    def prepared(self) -> Path:
        """Where step outputs are written before the catalog takes them in."""
        return self.catalog.root / "prepared"

    @property
    def reports_dir(self) -> Path:
        return self.prepared / "_reports"

    # -- inputs and outputs --------------------------------------------------------------
    def _folder(self, source: str) -> str:
        """A folder or URL source as it is read: a local one must lie in the store or a source root.

        With ``settings.source_roots`` set (the Jupyter server sets its root dir), a relative path
        is read from the first root and a path that leaves every root (``/``, ``./..//..``) is
        refused before anything is listed.
        """
        return check_source(source, self.settings.source_roots, self.catalog.root)

    def check(self, source: str, *, text_field: str | None = None) -> None:
        """The cheap checks of a step's input, before it starts: nothing is listed or read.

        ``source`` is a name, a folder or URL the step may read (under a source root when those
        are set), ``text_field`` a short UTF-8 name. A server calls this before it answers 202.
        """
        if text_field is not None:
            _text_field(text_field)
        check_path(source, "source", hint="e.g. corpus, corpus@2, ./raw or s3://bucket/raw")
        if "://" in source or os.sep in source or source.strip().startswith((".", "~")):
            self._folder(source.strip())

    def _input(self, source: str) -> _Input:
        check_path(source, "source", hint="e.g. corpus, corpus@2, ./raw or s3://bucket/raw")
        if not source.strip():
            raise BadInputError(
                "name a dataset", field="source", hint="e.g. corpus, corpus@2, ./raw or s3://bucket/raw"
            )
        source = source.strip()
        if "://" in source or os.sep in source or source.startswith((".", "~")):
            return _Input(source, list_files(self._folder(source)), [], None)
        ref = parse_ref(source)
        if not isinstance(ref, DatasetRef):
            raise BadInputError(
                f"{source!r} is a model, not a dataset", field="source", hint="name a dataset of the store"
            )
        try:
            entry = self.catalog.entry(source)
        except NotFoundError:
            local = source if not self.settings.source_roots else str(Path(self.settings.source_roots[0]) / source)
            if Path(local).exists():  # a folder of the working directory, named like no dataset
                return _Input(source, list_files(self._folder(source)), [], None)
            raise
        self.catalog.pull(entry.ref)
        folder = self.catalog.mount(entry.ref)
        prov_path = folder / "_starverse" / "provenance.json"
        provenance = json.loads(prov_path.read_text()) if prov_path.is_file() else []
        if not provenance:
            provenance = [
                {"step": "raw", "source": entry.source, "output": entry.ref, "params": {}, "at": entry.added_at}
            ]
        return _Input(entry.ref, list_files(str(folder)), provenance, DatasetRef(entry.name, entry.version))

    def _target(self, step: str, inp: _Input, to: str | None) -> DatasetRef:
        if to:
            ref = parse_ref(to)
            if not isinstance(ref, DatasetRef):
                raise BadInputError(f"{to!r} is not a dataset name", field="to", hint="e.g. corpus@clean")
            target = DatasetRef(ref.name, ref.version or f"{step}-{time.strftime('%Y%m%d%H%M%S')}")
        elif inp.ref is not None:
            target = DatasetRef(inp.ref.name, f"{inp.ref.version}-{step}")
        else:
            raise BadInputError(
                f"where should the {step} output go?",
                field="to",
                hint="pass --to NAME[@VERSION] for a folder or URL input",
            )
        try:
            self.catalog.entry(str(target))
        except NotFoundError:
            return target
        raise ConflictError(
            f"{target} already exists; a step never overwrites a dataset version",
            hint="pass --to NAME@ANOTHER-VERSION, or remove it with `starverse store rm`",
        )

    def _salt(self, salt: str | None) -> bytes | None:
        return resolve_salt(salt)

    def _model(self, ref: str | None, what: str, make: Callable[[Path], Any]) -> Any:
        if not ref:
            return None
        if not ref.startswith("hf:"):
            raise BadInputError(f"the {what} is a store model, hf:ORG/REPO", field=what, hint="e.g. hf:my-org/encoder")
        self.catalog.pull(ref)
        return make(self.catalog.mount(ref))

    # -- estimate ---------------------------------------------------------------------------
    def estimate(self, step: str, source: str, **options: Any) -> StepEstimate:
        """Time and peak memory of ``step`` on ``source``, from its size and a timed sample of documents."""
        if "text_field" in options:
            _text_field(options["text_field"])
        return self._estimate(step, self._input(source), options)

    def _estimate(self, step: str, inp: _Input, options: Mapping[str, Any], models: Sequence[Any] = ()) -> StepEstimate:
        if step not in STEPS:
            raise BadInputError(f"unknown step {step!r}", field="step", hint=f"steps: {', '.join(STEPS)}")
        size = inp.source.size
        sample: list[Doc] = []
        started = time.perf_counter()
        for doc in read_docs(inp.source, text_field=options.get("text_field", "text")):
            sample.append(doc)
            if len(sample) >= _SAMPLE:
                break
        read_s = time.perf_counter() - started
        sample_bytes = sum(len(d.text.encode()) + 16 for d in sample) or 1
        docs = max(len(sample), round(size / (sample_bytes / max(1, len(sample))))) if sample else 0
        setup = time.perf_counter()
        if step in ("scan", "clean"):
            find_pii("张伟住在北京")  # loads jieba's dictionary once: a fixed cost, not a per-document one
        if step == "dedup":
            from ._minhash import MinHasher

            h = MinHasher(num_perm=int(options.get("num_perm", 128)))  # imports datasketch once
        setup_s = time.perf_counter() - setup
        started = time.perf_counter()
        per_doc_factor = 1.0
        if step in ("scan", "clean"):
            for d in sample:
                find_pii(d.text)
        elif step == "dedup":
            from ._minhash import normalize

            for d in sample:
                h.signature(h.shingles(normalize(d.text)))
            per_doc_factor = 2.0  # the second pass, verification and paragraphs
        else:
            for d in sample:
                _steps.quality(d.text)
        work_s = time.perf_counter() - started
        for m in models:
            if hasattr(m, "perplexity"):
                t = time.perf_counter()
                for d in sample[:8]:
                    m.perplexity(d.text)
                work_s += (time.perf_counter() - t) * len(sample) / max(1, min(8, len(sample)))
            elif hasattr(m, "embed") and sample:
                t = time.perf_counter()
                m.embed([d.text for d in sample[:16]])
                work_s += (time.perf_counter() - t) * len(sample) / max(1, min(16, len(sample)))
        per_doc = (read_s + work_s * per_doc_factor) / max(1, len(sample))
        model_bytes = sum(getattr(m, "params", 0) * 4 * 3 for m in models)
        memory = 200 << 20  # the interpreter, numpy and jieba's dictionary
        basis = f"{len(sample)} sampled documents, {per_doc * 1e3:.2f} ms each"
        if setup_s >= 0.05:  # counted in the time: a dictionary or library loaded once per run
            what = "jieba's dictionary" if step in ("scan", "clean") else "datasketch" if step == "dedup" else "set-up"
            basis += f", plus {setup_s:.1f} s once ({what})"
        if step == "dedup":
            from ._minhash import PEAK_PER_BYTE

            # one document is signed at a time: its shingles bound the memory beyond the tables
            longest, scanned = _longest_record(inp.source, max((len(d.text.encode()) for d in sample), default=0))
            memory += int(options.get("max_memory", 256 << 20)) + docs * 24 + PEAK_PER_BYTE * longest
            if any(hasattr(m, "embed") for m in models):
                memory += docs * 4 * 384
            basis += f"; longest document {format_bytes(longest)}" + ("" if scanned else " (in the sample)")
            basis += "; comparing near duplicates is not in the time: it grows with how alike the documents are"
        memory += model_bytes
        return StepEstimate(step, inp.label, size, docs, setup_s + per_doc * docs, memory, basis)

    # -- steps --------------------------------------------------------------------------------
    def scan(
        self,
        source: str,
        *,
        text_field: str = "text",
        types: Sequence[str] | None = None,
        examples: int = 3,
        shards: tuple[int, int] | None = None,
        say: Say | None = None,
        progress: Progress | None = None,
    ) -> DataReport:
        """Count the sensitive fields per type, with masked examples and a suggested action (no new version).

        ``shards=(nodes, procs_per_node)`` runs the detection as a job of that many ranks.
        """
        _text_field(text_field)
        wanted = _types(types)
        inp = self._input(source)
        params: dict[str, Any] = {"text_field": text_field, "types": list(wanted), "examples": examples}

        def body(docs: Any, write: Any, work: Path, tick: Any, est: StepEstimate) -> _steps.StepResult:
            if shards:
                return self._sharded_pii("scan", inp, params, shards, work, write, dict(SUGGESTED), say)
            return _steps.scan(docs, types=wanted, examples=examples, progress=tick)

        return self._run("scan", inp, None, params, say, body, writes=False, progress=progress)

    def clean(
        self,
        source: str,
        *,
        actions: Mapping[str, str] | None = None,
        salt: str | None = None,
        to: str | None = None,
        text_field: str = "text",
        examples: int = 3,
        shards: tuple[int, int] | None = None,
        say: Say | None = None,
        progress: Progress | None = None,
    ) -> DataReport:
        """Apply an action per sensitive type (default: the suggested ones) and write a new version.

        ``salt`` is a reference, ``env:VARIABLE`` or ``file:PATH``; only the reference is recorded.
        """
        _text_field(text_field)
        deid = Deidentifier(actions, salt=self._salt(salt))
        inp = self._input(source)
        target = self._target("clean", inp, to)
        params: dict[str, Any] = {"text_field": text_field, "actions": dict(deid.actions), "salt": salt}

        def body(docs: Any, write: Any, work: Path, tick: Any, est: StepEstimate) -> _steps.StepResult:
            if shards:
                job_params = {**params, "examples": examples}
                return self._sharded_pii("clean", inp, job_params, shards, work, write, deid.actions, say)
            return _steps.clean(docs, write, deid=deid, examples=examples, progress=tick)

        return self._run("clean", inp, target, params, say, body, progress=progress)

    def dedup(
        self,
        source: str,
        *,
        threshold: float = 0.7,
        lsh_threshold: float = 0.5,
        num_perm: int = 128,
        ngram: int = 5,
        paragraph_share: float | None = 0.15,
        semantic_model: str | None = None,
        semantic_threshold: float = 0.95,
        max_memory: int = 256 << 20,
        to: str | None = None,
        text_field: str = "text",
        shards: tuple[int, int] | None = None,
        against: str | None = None,
        boilerplate_docs: int = 4,
        semantic_clusters: int = 0,
        say: Say | None = None,
        progress: Progress | None = None,
    ) -> DataReport:
        """Exact, MinHash near (Jaccard-verified), paragraph (> ``paragraph_share``) and semantic duplicates.

        A paragraph in ``boilerplate_docs`` documents or more is boilerplate: stripped, never a
        reason to remove a document. ``against`` names a version an earlier dedup wrote: the new
        batch ``source`` is checked against its kept signatures (and itself), and the union of
        both is written as a new version. The signatures of the output are kept beside it.
        """
        _text_field(text_field)
        _check_unit("threshold", threshold)
        _check_unit("lsh_threshold", lsh_threshold)
        _check_unit("semantic_threshold", semantic_threshold)
        if paragraph_share is not None:
            _check_unit("paragraph_share", paragraph_share)
        if lsh_threshold > threshold:
            raise BadInputError(
                "lsh_threshold must not exceed threshold",
                field="lsh_threshold",
                hint="candidates are found at lsh_threshold and kept at threshold, e.g. 0.5 and 0.7",
            )
        if not isinstance(boilerplate_docs, int) or boilerplate_docs < 2:
            raise BadInputError("boilerplate_docs must be 2 or more", field="boilerplate_docs", hint="e.g. 4")
        inp = self._input(source)
        from . import _incremental
        from ._models import load_encoder

        old: _Input | None = None
        against_dir: Path | None = None
        if against:
            old = self._input(against)
            if old.ref is None:
                raise BadInputError(
                    "--against names a store dataset version", field="against", hint="e.g. corpus@1-dedup"
                )
            against_dir = _incremental.require(self.catalog.mount(str(old.ref)), old.label)
            batch = f"{inp.ref.name}-{inp.ref.version}" if inp.ref else "batch"
            to = to or f"{old.ref.name}@{old.ref.version}-plus-{batch}"
            inp = _Input(
                inp.label, inp.source, [*old.provenance, *({**r, "batch": True} for r in inp.provenance)], inp.ref
            )
        target = self._target("dedup", inp, to)
        encoder = self._model(semantic_model, "semantic_model", load_encoder)
        params = {
            "text_field": text_field,
            "threshold": threshold,
            "lsh_threshold": lsh_threshold,
            "num_perm": num_perm,
            "ngram": ngram,
            "paragraph_share": paragraph_share,
            "semantic_model": semantic_model,
            "semantic_threshold": semantic_threshold,
            "max_memory": max_memory,
            "boilerplate_docs": boilerplate_docs,
            "semantic_clusters": semantic_clusters,
            "semantic_encoder": getattr(encoder, "kind", None),
            "against": against,
        }
        models = [encoder] if encoder else []

        def body(docs: Any, write: Any, work: Path, tick: Any, est: StepEstimate) -> _steps.StepResult:
            p = _steps.DedupParams(
                threshold,
                lsh_threshold,
                num_perm,
                ngram,
                paragraph_share,
                max_memory,
                encoder,
                semantic_threshold,
                expected_docs=est.docs,
                boilerplate_docs=boilerplate_docs,
                semantic_clusters=semantic_clusters,
            )
            beside = work / "out" / "_starverse" / _incremental.FOLDER
            kept_old = 0
            if old is not None:
                for doc in read_docs(old.source, text_field=text_field):  # the clean version comes first
                    write(doc, doc.text)
                    kept_old += 1
            if shards:
                world = shards[0] * shards[1]
                prep = work / "shards"
                if against_dir is not None:
                    _incremental.old_config(against_dir, p).save(prep / "stages")
                else:
                    p.stage_config(est.docs).save(prep / "stages")
                job_params = dict(params)
                mounts = [m for m in (semantic_model,) if m]
                if old is not None:
                    job_params["against_mount"] = old.label
                    mounts.append(old.label)
                out = self._shard_job("dedup", inp, job_params, shards, work, say, extra_mounts=tuple(mounts))
                offset = _incremental.old_docs(against_dir) if against_dir is not None else 0

                def merged() -> Iterator[Doc]:
                    for row, i in merge_rows_idx(out, world):
                        yield Doc(i - offset, "", 0, str((row or {}).get(text_field, "")), row or {})

                result = _steps.dedup(merged, write, work, params=p, progress=tick, staged=out / "stages",
                                      against=against_dir)  # fmt: skip
                if encoder is not None:  # embedded by the ranks, each its shard
                    from . import _stages
                    from ._semantic import semantic_note

                    cfg = _stages.StageConfig.load(out / "stages")
                    result.notes.append(semantic_note(out / "stages", cfg, encoder)[0])
                result.malformed = malformed_of(out)
                result.ranks = rank_figures(out, world)
                result.notes.append(f"the dedup stages ran as {shards[0]} x {shards[1]} ranks")
                union = _incremental.keep_beside(out / "stages", beside, against=against_dir)
            else:
                result = _steps.dedup(docs, write, work, params=p, progress=tick, against=against_dir)
                union = _incremental.keep_beside(work / "stages", beside, against=against_dir)
            if old is not None:
                result.notes.append(
                    f"against {old.label}: {kept_old:,} documents kept as they were, {result.docs_out:,} of "
                    f"{result.docs_in:,} new ones added ({union:,} in all); its signatures were read, not recomputed"
                )
            return result

        reads = 1 if shards else (3 if encoder else 2)  # a sharded run: the ranks read; here the merged rows
        return self._run("dedup", inp, target, params, say, body, models=models, progress=progress, reads=reads)

    def score(
        self,
        source: str,
        *,
        min_quality: float | None = 0.5,
        lm: str | None = None,
        max_perplexity: float | None = None,
        encoder: str | None = None,
        examples: Sequence[str] = (),
        min_relevance: float | None = None,
        to: str | None = None,
        text_field: str = "text",
        say: Say | None = None,
        progress: Progress | None = None,
    ) -> DataReport:
        """Quality heuristics, perplexity under ``lm`` and relevance to ``examples``; removes past the thresholds."""
        _text_field(text_field)
        if max_perplexity is not None and lm is None:
            raise BadInputError("max_perplexity needs a language model", field="lm", hint="pass --lm hf:ORG/REPO")
        if min_relevance is not None and not examples:
            raise BadInputError(
                "min_relevance needs example texts",
                field="examples",
                hint="pass --example TEXT (repeatable) or --examples FILE",
            )
        inp = self._input(source)
        target = self._target("score", inp, to)
        from ._models import Encoder, LanguageModel

        model = self._model(lm, "lm", LanguageModel)
        enc = self._model(encoder, "encoder", Encoder)
        sp = _steps.ScoreParams(min_quality, max_perplexity, min_relevance, tuple(examples), model, enc)
        params = {
            "text_field": text_field,
            "min_quality": min_quality,
            "lm": lm,
            "max_perplexity": max_perplexity,
            "encoder": encoder,
            "examples": len(examples),
            "min_relevance": min_relevance,
        }
        return self._run(
            "score",
            inp,
            target,
            params,
            say,
            lambda docs, write, work, tick, est: _steps.score(docs, write, params=sp, progress=tick),
            models=[m for m in (model, enc) if m],
            progress=progress,
        )

    # -- the common run -----------------------------------------------------------------------
    def _run(
        self,
        step: str,
        inp: _Input,
        target: DatasetRef | None,
        params: dict[str, Any],
        say: Say | None,
        body: Callable[..., _steps.StepResult],
        *,
        writes: bool = True,
        models: Sequence[Any] = (),
        progress: Progress | None = None,
        reads: int = 1,
    ) -> DataReport:
        say = say or (lambda text: None)
        began = time.perf_counter()  # "took" is what the user waited: the estimate and fixed costs too
        text_field = params["text_field"]
        meter = ProgressMeter(step, progress, passes=reads)
        meter.phase("estimating")
        estimate = self._estimate(step, inp, params, models)
        meter.expect(estimate.docs, estimate.bytes)
        say(str(estimate))
        malformed: list[Malformed] = []
        malformed_total = 0
        passes = 0

        def report(m: Malformed) -> None:
            nonlocal malformed_total
            if passes == 1:  # a second pass reads the same lines again
                malformed_total += 1
                if len(malformed) < _MALFORMED_SHOWN:
                    malformed.append(m)

        def docs() -> Iterator[Doc]:
            nonlocal passes
            passes += 1
            return meter.read(read_docs(inp.source, text_field=text_field, report=report))

        def tick(n: int) -> None:
            say(f"{step}: {n:,} documents")

        named = (target or inp.ref or DatasetRef("input")).name
        report_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{step}-{named}-{secrets.token_hex(2)}"
        self.prepared.mkdir(parents=True, exist_ok=True)
        work = self.prepared / f".work-{report_id}"
        final = self.prepared / target.name / str(target.version) if target else None
        staging = work / "out"
        (staging / "_starverse").mkdir(parents=True, exist_ok=True)
        try:
            with (
                open(staging / "data.jsonl", "w", encoding="utf-8") as out,
                open(staging / ORIGINS, "w", encoding="utf-8") as origins,
            ):

                def write(doc: Doc, text: str) -> None:
                    row = dict(doc.row)
                    row[text_field] = text
                    out.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
                    origins.write(origin_line(doc))  # the user's file and line, through every step

                result = body(docs, write if writes else None, work, tick, estimate)
            meter.phase("publishing")
            elapsed = time.perf_counter() - began
            if result.malformed and not malformed_total:  # read by the ranks of a sharded job
                malformed_total = len(result.malformed)
                malformed = [Malformed(**m) for m in result.malformed[:_MALFORMED_SHOWN]]
            step_record = {
                "step": step,
                "source": inp.label,
                "output": str(target) if target else None,
                "params": params,
                "docs_in": result.docs_in,
                "docs_out": result.docs_out,
                "removed": result.removed,
                "at": time.time(),
            }
            provenance = [*inp.provenance, step_record] if target else inp.provenance
            rep = DataReport(
                id=report_id,
                step=step,
                source=inp.label,
                output=str(target) if target else None,
                params=params,
                docs_in=result.docs_in,
                docs_out=result.docs_out,
                removed=result.removed,
                malformed_total=malformed_total,
                malformed=tuple({**m.to_json(), "reason": clip(m.reason)} for m in malformed),
                pii=tuple(result.pii),
                clusters=tuple(result.clusters),
                preview=tuple(result.preview),
                histograms=tuple(result.histograms),
                examples=tuple(result.examples),
                estimate=estimate,
                elapsed_s=elapsed,
                created_at=time.time(),
                provenance=tuple(provenance),
                notes=tuple(result.notes),
                ranks=tuple(result.ranks),
            )
            if target is None or final is None:
                self._save_report(rep)
                meter.phase("done")
                return rep
            _write_text(staging / "_starverse" / "report.json", json.dumps(rep.to_json(), ensure_ascii=False, indent=1))
            _write_text(staging / "_starverse" / "report.html", report_html(rep))
            _write_text(
                staging / "_starverse" / "provenance.json", json.dumps(provenance, ensure_ascii=False, indent=1)
            )
            if (work / "removed.jsonl").is_file():  # dedup: every removed document and what it duplicated
                (work / "removed.jsonl").replace(staging / "_starverse" / "removed.jsonl")
            final.parent.mkdir(parents=True, exist_ok=True)
            if final.exists():
                shutil.rmtree(final)  # left by a run that died before the catalog took it in
            staging.rename(final)  # the whole version appears at once
            self.catalog.add_dataset(
                target.name, str(final), version=str(target.version), description=f"{step} of {inp.label}",
                derived_from=str(inp.ref) if inp.ref is not None else None,
            )  # fmt: skip
            self.catalog.pull(str(target))
            self._save_report(rep)  # listed once the version it names exists
            say(f"{step}: wrote {target} ({result.docs_out:,} of {result.docs_in:,} documents)")
            meter.phase("done")
            return rep
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
            free = shutil.disk_usage(self.prepared).free if self.prepared.is_dir() else 0
            raise StoreError(
                f"the store at {self.prepared} is full ({format_bytes(free)} free): {step} wrote nothing",
                hint="free space with `starverse store evict --max-bytes N` or `starverse store rm NAME`, "
                "then run the step again",
            ) from e
        finally:
            shutil.rmtree(work, ignore_errors=True)

    # -- sharded runs ------------------------------------------------------------------------------
    def _shard_job(
        self,
        step: str,
        inp: _Input,
        params: Mapping[str, Any],
        shards: tuple[int, int],
        work: Path,
        say: Say | None,
        *,
        extra_mounts: tuple[str, ...] = (),
    ) -> Path:
        """Run the per-document work of ``step`` as a job of ``nodes x procs`` ranks; their output folder."""
        nodes, procs = shards
        if self._submit is None or self._wait is None:
            raise BadInputError("sharded runs need a launcher", field="shards", hint="use Starverse().data")
        if inp.ref is None:
            raise BadInputError(
                "a sharded run reads a store dataset (every rank mounts it)",
                field="source",
                hint="add the folder first: starverse store add NAME FOLDER",
            )
        out = work / "shards"
        out.mkdir(parents=True, exist_ok=True)
        args = ("--step", step, "--mount", inp.label, "--out", str(out), "--params", json.dumps(dict(params)))
        spec = JobSpec(
            name=f"data-{step}-{inp.ref.name}"[:63].lower(),
            code=JOB_CODE,
            args=(*args, "--text-field", str(params.get("text_field", "text"))),
            nodes=nodes,
            procs_per_node=procs,
            accelerator="cpu",
            mounts=(inp.label, *extra_mounts),
        )
        job = self._submit(spec)
        (say or (lambda text: None))(f"{step}: job {job.id} ({nodes} x {procs} ranks)")
        done = self._wait(job, None)
        missing = missing_ranks(out, nodes * procs)
        if done.state is not JobState.SUCCEEDED or missing:
            raise StoreError(
                f"the {step} job {job.id} ended {done.state.value}"
                + (f"; ranks {missing} wrote nothing" if missing else ""),
                hint=f"see `starverse jobs logs {job.id}`",
            )
        return out

    def _sharded_pii(
        self,
        step: str,
        inp: _Input,
        params: Mapping[str, Any],
        shards: tuple[int, int],
        work: Path,
        write: Any,
        actions: Mapping[str, str],
        say: Say | None,
    ) -> _steps.StepResult:
        out = self._shard_job(step, inp, params, shards, work, say)
        world = shards[0] * shards[1]
        res = _steps.StepResult()
        res.malformed = merge_tallies(out, world, res, dict(actions), int(params.get("examples", 3)))
        if step == "clean":
            text_field = str(params.get("text_field", "text"))
            for row in merge_rows(out, world):
                if row is None:
                    res.removed["pii_drop"] = res.removed.get("pii_drop", 0) + 1
                    continue
                text = str(row.get(text_field, ""))
                write(Doc(0, "", 0, text, row), text)
                res.docs_out += 1
        else:
            res.docs_out = res.docs_in
        res.ranks = rank_figures(out, world)
        res.notes.append(f"ran as {shards[0]} x {shards[1]} ranks, merged in document order")
        return res

    # -- reports ---------------------------------------------------------------------------------
    def _save_report(self, rep: DataReport) -> None:
        self.reports_dir.mkdir(parents=True, exist_ok=True)
        _write_text(self.reports_dir / f"{rep.id}.json", json.dumps(rep.to_json(), ensure_ascii=False))
        _write_text(self.reports_dir / f"{rep.id}.html", report_html(rep))

    def reports(self) -> ReportList:
        """Every step's report on the store, newest first."""
        out = []
        if self.reports_dir.is_dir():
            for path in self.reports_dir.glob("*.json"):
                try:
                    out.append(DataReport.from_json(json.loads(path.read_text())).summary())
                except (OSError, ValueError, KeyError, TypeError):
                    continue  # a report being written, or not ours
        return ReportList(tuple(sorted(out, key=lambda r: r.created_at, reverse=True)))

    def report(self, report_id: str) -> DataReport:
        """One report by id (``starverse data reports`` lists them)."""
        hint = "`starverse data reports` lists them"
        if isinstance(report_id, str):
            check_path(f"{report_id}.html", "id", hint=hint)  # the longer of its two files
        if not isinstance(report_id, str) or not report_id or "/" in report_id or report_id.startswith("."):
            raise BadInputError(
                f"{report_id!r} is not a report id", field="id", hint="`starverse data reports` lists them"
            )
        path = self.reports_dir / f"{report_id}.json"
        if not path.is_file():
            raise NotFoundError(f"no data report {report_id!r}", hint="`starverse data reports` lists them")
        return DataReport.from_json(json.loads(path.read_text()))

    def report_html(self, report_id: str) -> str:
        return report_html(self.report(report_id))


def _text_field(value: object) -> str:
    """The name of the text field: a short UTF-8 string (it is repeated in every report line about it)."""
    text = check_text(
        value,
        "text_field",
        max_len=MAX_FIELD,
        hint=f"the JSON key or CSV column, at most {MAX_FIELD} characters, e.g. text",
    )
    assert text is not None
    return text


def _types(types: Sequence[str] | None) -> tuple[str, ...]:
    if not types:
        return PII_TYPES
    bad = [t for t in types if t not in PII_TYPES]
    if bad:
        raise BadInputError(f"unknown sensitive type {bad[0]!r}", field="types", hint=f"types: {', '.join(PII_TYPES)}")
    return tuple(types)


def _check_unit(name: str, value: float) -> None:
    if not isinstance(value, int | float) or not 0.0 < float(value) <= 1.0:
        raise BadInputError(f"{name} must be in (0, 1], not {value!r}", field=name, hint="e.g. 0.7")


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


_SCAN_BYTES = 4 << 30  # line lengths of up to this much of a corpus are measured for the estimate


def _longest_record(source: Source, sampled: int) -> tuple[int, bool]:
    """The longest line of the corpus's line files (JSON lines, text), in bytes, and whether all were measured.

    One pass over newline positions (numpy, no decoding: gigabytes a second). Other formats,
    compressed files and what lies past :data:`_SCAN_BYTES` count only by the sampled documents.
    """
    import numpy as np

    longest, budget, complete = sampled, _SCAN_BYTES, True
    for rel in source.files:
        if not rel.lower().endswith((".jsonl", ".ndjson", ".txt")):
            complete = False
            continue
        run = 0
        try:
            with source.fs.open(source._full(rel), "rb") as f:
                while budget > 0:
                    chunk = f.read(min(8 << 20, budget))
                    if not chunk:
                        break
                    budget -= len(chunk)
                    ends = np.flatnonzero(np.frombuffer(chunk, dtype=np.uint8) == 10)
                    if not len(ends):
                        run += len(chunk)
                        continue
                    longest = max(longest, run + int(ends[0]))
                    if len(ends) > 1:
                        longest = max(longest, int(np.diff(ends).max()) - 1)
                    run = len(chunk) - int(ends[-1]) - 1
                else:
                    complete = False
        except OSError:
            complete = False
        longest = max(longest, run)
    return longest, complete
