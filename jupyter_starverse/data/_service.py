"""The data preparation service: every step reads a store dataset and writes a NEW version.

A step reads ``NAME[@VERSION]`` (pulled first if needed) or a folder/fsspec URL, runs, and
publishes its output as a new version of a dataset in the catalog (the source is never
touched). The version folder holds ``data.jsonl`` and ``_starverse/`` with the report (JSON
and HTML) and the provenance: every step since the raw data, with its parameters and counts.
Reports are also kept under ``prepared/_reports`` on the store for listing.

This module holds the steps' parameters and bodies and the reading of inputs and reports; the
common run and publishing are :mod:`._runner`, the estimate :mod:`._estimate`, the input checks
:mod:`._inputs`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from jupyter_starverse._inputs import check_path
from jupyter_starverse._settings import Settings
from jupyter_starverse.catalog import Catalog, DatasetRef, check_source, parse_ref
from jupyter_starverse.errors import BadInputError, ConflictError, NotFoundError
from jupyter_starverse.jobmodel import Job, JobSpec

from . import _steps
from ._html import report_html
from ._inputs import MAX_FIELD as MAX_FIELD
from ._inputs import STEPS as STEPS
from ._inputs import Say, _check_unit, _Input, _text_field, _types
from ._pii import SUGGESTED, Deidentifier, resolve_salt
from ._progress import Progress
from ._read import Doc, list_files, read_docs
from ._runner import StepRunner
from ._shard import malformed_of, merge_rows_idx, rank_figures
from ._types import DataReport, ReportList, StepEstimate

__all__ = ["DataPrep"]


class DataPrep(StepRunner):
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
        semantic_threshold: float | None = None,
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
        if encoder is not None:
            encoder.ref = semantic_model  # its id in reports and beside kept vectors
        if semantic_threshold is None:  # per encoder kind: see _semantic.DEFAULT_THRESHOLDS
            from ._semantic import default_threshold

            semantic_threshold = default_threshold(encoder) if encoder is not None else 0.95
        _check_unit("semantic_threshold", semantic_threshold)
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
                    p.stage_config(est.docs, ranks=world).save(prep / "stages")
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
                old_docs = None
                if old is not None:
                    old_src = old.source

                    def old_docs() -> Iterator[Doc]:
                        return read_docs(old_src, text_field=text_field)

                result = _steps.dedup(docs, write, work, params=p, progress=tick, against=against_dir,
                                      old_version=old_docs, say=say)  # fmt: skip
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
