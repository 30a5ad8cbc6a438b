"""The common run of a data step: estimate, read, write a staging version, publish, report.

:class:`StepRunner` is what :class:`~._service.DataPrep` inherits for every step: ``_run`` reads
the input (counting malformed lines once), hands the step's body a writer, and publishes the
staged version with its report and provenance in one rename; ``_shard_job`` runs a step's
per-document work as a job of ranks and ``_sharded_pii`` merges a sharded scan or clean. The
steps' own parameters and bodies live in :mod:`._service`.
"""

from __future__ import annotations

import errno
import json
import secrets
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from jupyter_starverse._format import format_bytes
from jupyter_starverse._settings import Settings
from jupyter_starverse.catalog import Catalog, DatasetRef
from jupyter_starverse.errors import BadInputError, StoreError
from jupyter_starverse.jobmodel import Job, JobSpec, JobState

from . import _steps
from ._estimate import estimate_step
from ._html import report_html
from ._inputs import Say, _Input, _write_text
from ._progress import Progress, ProgressMeter
from ._read import ORIGINS, Doc, Malformed, origin_line, read_docs
from ._shard import JOB_CODE, merge_rows, merge_tallies, missing_ranks, rank_figures
from ._types import DataReport, StepEstimate, clip

_MALFORMED_SHOWN = 100


class StepRunner:
    """Runs a step's body and publishes what it wrote (the store's places, the job launcher)."""

    settings: Settings
    catalog: Catalog
    _submit: Callable[[JobSpec], Job] | None
    _wait: Callable[[Job, float | None], Job] | None

    # -- places ------------------------------------------------------------------------
    @property
    def prepared(self) -> Path:
        """Where step outputs are written before the catalog takes them in."""
        return self.catalog.root / "prepared"

    @property
    def reports_dir(self) -> Path:
        return self.prepared / "_reports"

    def _estimate(self, step: str, inp: _Input, options: Mapping[str, Any], models: Sequence[Any] = ()) -> StepEstimate:
        return estimate_step(step, inp, options, models)

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
        report_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{step}-{named}-{secrets.token_hex(4)}"
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
