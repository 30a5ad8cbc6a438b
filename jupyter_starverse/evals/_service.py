"""``client.evals``: score models on a labelled store dataset; reports are store records.

``evaluate(MODEL, DATA, baselines=...)`` reads the examples once, runs every model on the same
examples (batched; predictions appended to ``STORE/evals/.work/KEY/MODEL.jsonl`` so a killed
run resumes), scores them and writes one report per model to ``STORE/evals/ID/`` (``report.json``
with the lineage of the model and the dataset version, and ``predictions.jsonl``).
``reports(model=, data=)`` lists them (``store show MODEL``), ``compare(DATA, models)`` is the
chain base -> CPT -> SFT -> DPO -> INT4 and :meth:`gate` the export's accuracy check.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from jupyter_starverse._settings import Settings
from jupyter_starverse.catalog import Catalog
from jupyter_starverse.errors import BadInputError, NotFoundError
from jupyter_starverse.experiments import read_metrics
from jupyter_starverse.feedback import resolve_model
from jupyter_starverse.jobmodel import JobSpec

from ._curve import CurveCheck, ReferenceCurve
from ._dataset import read_dataset
from ._gate import AccuracyGate, GateFigure, score_graphs
from ._predict import load_predictor
from ._report import HEADLINE, EvalChain, EvalReport, EvalRun, ScoreCard, read_predictions
from ._run import Dataset, EvalProgress, TaskOptions, candidate_labels, predict_all, score

__all__ = ["AccuracyGate", "EvalService", "GateFigure"]

LINEAGE = "starverse-lineage.json"


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:80]


class EvalService:
    """Evaluations of store models, experiment outputs and exported versions (``client.evals``)."""

    def __init__(self, settings: Settings, catalog: Catalog) -> None:
        self.settings = settings
        self.catalog = catalog
        # report.json -> (mtime_ns, size, report): the panel lists every report every few seconds,
        # and a report never changes once written (tmp + rename), so only new files are parsed
        self._parsed: dict[Path, tuple[int, int, EvalReport]] = {}
        self._lock = threading.Lock()

    @property
    def root(self) -> Path:
        return self.catalog.root / "evals"

    # -- inputs ------------------------------------------------------------------------------------
    def dataset(
        self,
        data: str,
        *,
        input_field: str = "input",
        target_field: str = "target",
        task: str = "classification",
        limit: int | None = None,
    ) -> Dataset:
        """The examples of a store dataset ``NAME[@VERSION]`` (or a local file/folder)."""
        return read_dataset(
            self.catalog, data, input_field=input_field, target_field=target_field, task=task, limit=limit
        )

    def _model_version(self, model: str, folder: Path) -> tuple[str | None, dict[str, Any]]:
        lineage: dict[str, Any] = {}
        try:
            data = json.loads((folder / LINEAGE).read_text(encoding="utf-8"))
            lineage = data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            pass
        if model.startswith("hf:"):
            return self.catalog.status(model).commit, lineage
        return str(folder), lineage

    # -- running -------------------------------------------------------------------------------
    def evaluate(
        self,
        model: str,
        data: str,
        *,
        baselines: Sequence[str] = (),
        task: str = "classification",
        input_field: str = "input",
        target_field: str = "target",
        options: TaskOptions | None = None,
        limit: int | None = None,
        progress: Callable[[EvalProgress], None] | None = None,
        threads: int | None = None,
        harness: bool = False,
        harness_task: str | Path | None = None,
    ) -> EvalRun:
        """Score ``model`` and each baseline on the same examples of ``data``; one report each.

        ``harness=True`` runs the task through lm-evaluation-harness (a YAML task rendered over the
        same examples; lm-eval's metrics beside ours); ``harness_task=FILE`` runs a team's own
        lm-eval task YAML over its local files instead of ``data`` (give ``data=""``).
        """
        opts = replace(options or TaskOptions(), task=task)
        opts.check()
        models = list(dict.fromkeys([model, *baselines]))
        if harness_task is not None and str(data or "").strip():
            raise BadInputError(
                "an lm-eval task file names its own data; give --data or --harness-task, not both",
                field="harness_task",
                hint="drop --data, or drop --harness-task and add --harness",
            )
        if harness or harness_task is not None:
            from ._harness import lm_eval_version, load_task_file

            lm_eval_version()  # the extra is missing: say so before loading anything
            file_task = load_task_file(Path(harness_task)) if harness_task is not None else None
        folders = [resolve_model(self.settings, self.catalog, m) for m in models]  # a wrong name fails first
        if harness_task is not None:
            return EvalRun(tuple(self._one_harness(n, f, None, file_task, opts, limit, progress, threads)
                                 for n, f in zip(models, folders, strict=True)))  # fmt: skip
        ds = self.dataset(data, input_field=input_field, target_field=target_field, task=task, limit=limit)
        if harness:
            fields = (input_field, target_field)
            return EvalRun(tuple(self._one_harness(n, f, ds, None, opts, None, progress, threads, fields)
                                 for n, f in zip(models, folders, strict=True)))  # fmt: skip
        reports = []
        for name, folder in zip(models, folders, strict=True):
            reports.append(self._one(name, folder, ds, opts, input_field, target_field, progress, threads))
        return EvalRun(tuple(reports))

    def _work_file(
        self, model: str, version: str | None, ds: Dataset, opts: TaskOptions, fields: tuple[str, str]
    ) -> Path:
        key = json.dumps([model, version, ds.ref, ds.version, len(ds.examples), opts.to_json(), fields], sort_keys=True)
        digest = hashlib.sha256(key.encode()).hexdigest()[:20]
        return self.root / ".work" / f"{_slug(model)}-{digest}.jsonl"

    def _one(
        self,
        model: str,
        folder: Path,
        ds: Dataset,
        opts: TaskOptions,
        input_field: str,
        target_field: str,
        progress: Callable[[EvalProgress], None] | None,
        threads: int | None,
    ) -> EvalReport:
        started = time.monotonic()
        version, lineage = self._model_version(model, folder)
        work = self._work_file(model, version, ds, opts, (input_field, target_field))
        pred = load_predictor(folder, threads=threads)
        predict_all(pred, ds.examples, opts, work, model=model, progress=progress)
        rows = read_predictions(work)
        metrics, per_label, notes = score(opts.task, rows)
        if ds.skipped:
            notes = [*notes, f"{ds.skipped} records without the fields were skipped"]
        report_id, folder_out = self._new_report()
        preds = folder_out / "predictions.jsonl"
        shutil.move(str(work), preds)  # a finished run's file is the report's; a rerun predicts afresh
        report = EvalReport(
            id=report_id,
            model=model,
            model_version=version,
            dataset=ds.ref,
            dataset_version=ds.version,
            task=opts.task,
            examples=len(rows),
            metrics=metrics,
            per_label=per_label,
            predictions=str(preds),
            engine=pred.engine,
            seconds=time.monotonic() - started,
            created_at=time.time(),
            user=self.settings.user,
            options={**opts.to_json(), "input_field": input_field, "target_field": target_field},
            lineage={
                "model": model,
                "model_version": version,
                "dataset": ds.ref,
                "dataset_version": ds.version,
                "parent": lineage or None,
            },
            notes=notes,
        )
        return self._write_report(folder_out, report)

    def _new_report(self) -> tuple[str, Path]:
        report_id = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]
        folder_out = self.root / report_id
        folder_out.mkdir(parents=True, exist_ok=True)
        return report_id, folder_out

    def _one_harness(
        self,
        model: str,
        folder: Path,
        ds: Dataset | None,
        file_task: Any,
        opts: TaskOptions,
        limit: int | None,
        progress: Callable[[EvalProgress], None] | None,
        threads: int | None,
        fields: tuple[str, str] = ("input", "target"),
    ) -> EvalReport:
        """One model through lm-eval: ``ds``'s examples as a rendered task, or a team's ``file_task``."""
        from ._harness import FILE_TASK, HarnessTask, lm_eval_version, render_task, run_harness, write_examples

        started = time.monotonic()
        version, lineage = self._model_version(model, folder)
        if ds is not None:
            name = f"starverse_{_slug(ds.ref.split('@')[0]).replace('.', '_')}_{opts.task}"
            work = self._work_file(model, version, ds, opts, fields).with_suffix(".lm-eval")
            labels = candidate_labels(opts, ds.examples) if opts.task == "classification" else []

            def render(data_file: Path) -> HarnessTask:
                return render_task(name, data_file, task=opts.task, prompt=opts.prompt, labels=labels,
                                   max_new_tokens=opts.max_new_tokens)  # fmt: skip

            task = render(write_examples(work / "examples.jsonl", ds.examples))
            ref, data_version, kind, total = ds.ref, ds.version, opts.task, len(ds.examples)
        else:
            task = file_task
            key = json.dumps([model, version, task.name, task.digest(), limit, opts.batch_size])
            work = self.root / ".work" / f"{_slug(model)}-{hashlib.sha256(key.encode()).hexdigest()[:20]}.lm-eval"
            ref, data_version, kind, total = f"{FILE_TASK}:{task.name}", task.digest(), FILE_TASK, 0
        harness_version = lm_eval_version()
        pred = load_predictor(folder, threads=threads)
        t0 = time.monotonic()

        def say(done: int, of: int) -> None:  # requests -> examples where the examples are known
            if progress is None or not of:
                return
            n = total or of
            ex = min(n, done * n // of)
            elapsed = time.monotonic() - t0
            rate = ex / elapsed if elapsed > 0 and ex else None
            progress(EvalProgress(model, ex, n, elapsed, rate, (n - ex) / rate if rate else None))

        lm_metrics, rows, config = run_harness(pred, task, work, limit=limit, batch_size=opts.batch_size, progress=say)
        metrics, per_label, notes = ({}, [], []) if ds is None else score(opts.task, rows)
        metrics = {**metrics, **lm_metrics}
        if ds is not None and ds.skipped:
            notes = [*notes, f"{ds.skipped} records without the fields were skipped"]
        report_id, folder_out = self._new_report()
        preds = folder_out / "predictions.jsonl"
        preds.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        keep = folder_out / "lm-eval"  # the task as lm-eval reads it: `lm_eval --include_path keep --tasks NAME`
        keep.mkdir()
        if ds is not None:
            task = render(write_examples(keep / "examples.jsonl", ds.examples))
        (keep / f"{task.name}.yaml").write_text(task.yaml, encoding="utf-8")
        shutil.rmtree(work, ignore_errors=True)  # the finished run's cache; a rerun asks afresh
        options: dict[str, Any] = {**opts.to_json(), "task": kind}
        if ds is not None:
            options.update(input_field=fields[0], target_field=fields[1], labels=list(labels))
        options["harness"] = {"task": task.name, "lm_eval": harness_version, "output_type": task.output_type,
                              "yaml": str(keep / f"{task.name}.yaml"), "source": str(file_task.folder) if ds is None
                              else None, "limit": limit, "config": config}  # fmt: skip
        report = EvalReport(
            id=report_id,
            model=model,
            model_version=version,
            dataset=ref,
            dataset_version=data_version,
            task=kind,
            examples=len(rows),
            metrics=metrics,
            per_label=per_label,
            predictions=str(preds),
            engine=f"lm-eval {harness_version} ({pred.engine})",
            seconds=time.monotonic() - started,
            created_at=time.time(),
            user=self.settings.user,
            options=options,
            lineage={
                "model": model,
                "model_version": version,
                "dataset": ref,
                "dataset_version": data_version,
                "parent": lineage or None,
            },
            notes=notes,
        )
        return self._write_report(folder_out, report)

    def _write_report(self, folder_out: Path, report: EvalReport) -> EvalReport:
        tmp = folder_out / ".report.json.tmp"
        tmp.write_text(json.dumps(report.to_json(), indent=1, ensure_ascii=False), encoding="utf-8")
        tmp.replace(folder_out / "report.json")
        return report

    # -- records -------------------------------------------------------------------------------
    def reports(self, *, model: str | None = None, data: str | None = None) -> list[EvalReport]:
        """Every stored report (oldest first), of one model and/or one dataset."""
        out: list[EvalReport] = []
        if not self.root.is_dir():
            return out
        for rep in self._read_all():
            if model is not None and rep.model != model:
                continue
            if data is not None and rep.dataset != data and rep.dataset.split("@")[0] != data:
                continue
            out.append(rep)
        return sorted(out, key=lambda r: (r.created_at, r.id))

    def _read_all(self) -> list[EvalReport]:
        """Every readable report; a file is parsed again only when its mtime or size changed."""
        seen: dict[Path, tuple[int, int, EvalReport]] = {}
        with self._lock:
            known = dict(self._parsed)
        for path in sorted(self.root.glob("*/report.json")):
            try:
                st = path.stat()
                hit = known.get(path)
                if hit is not None and hit[:2] == (st.st_mtime_ns, st.st_size):
                    seen[path] = hit
                    continue
                rep = EvalReport.from_json(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError, TypeError):
                continue
            seen[path] = (st.st_mtime_ns, st.st_size, rep)
        with self._lock:
            self._parsed = seen  # a removed report leaves the cache with its file
        return [rep for _, _, rep in seen.values()]

    def card(self, ref: str) -> ScoreCard:
        """A store entry's state and every score of it (``store show REF``)."""
        status = self.catalog.status(ref)
        return ScoreCard(status.ref, status, tuple(self.reports(model=ref) or self.reports(model=status.ref)))

    def report(self, report_id: str) -> EvalReport:
        if not report_id or "/" in report_id or report_id.startswith("."):
            raise BadInputError(f"{report_id!r} is not a report id", field="id", hint="see `starverse eval ls`")
        path = self.root / report_id / "report.json"
        if not path.is_file():
            raise NotFoundError(f"no evaluation report {report_id!r}", hint="see `starverse eval ls`")
        return EvalReport.from_json(json.loads(path.read_text(encoding="utf-8")))

    def compare(self, data: str, models: Sequence[str]) -> EvalChain:
        """The newest report of each model on ``data``, in the order given (a lineage chain)."""
        if not models:
            raise BadInputError("name the models of the chain", field="models", hint="eval compare --data D M1 M2 ...")
        found, missing = [], []
        for m in models:
            reps = self.reports(model=m, data=data)
            if reps:
                found.append(reps[-1])
            else:
                missing.append(m)
        return EvalChain(data, tuple(found), tuple(missing))

    # -- reference curves ----------------------------------------------------------------------
    def curve(self, run_dir: Path, reference: str, *, tolerance: float | None = None,
              total_steps: int | None = None, small: bool | None = None) -> CurveCheck:  # fmt: skip
        """A run's logged loss held against a reproduction's reference curve (``recipes/curves``).

        A ``--small`` run (``small=None``: told by its ``spec.json``) is compared but not held
        against the full-size curve: its departures are listed, not warned about."""
        curve = ReferenceCurve.load(reference)
        points = [p for p in read_metrics(run_dir) if p.rank == 0 and curve.metric in p.values]
        if not points:
            raise NotFoundError(f"{run_dir} has no {curve.metric!r} logged yet", hint="wait for the first steps")
        live = [(p.step, float(p.values[curve.metric]), p.values.get("tokens")) for p in points]
        held = not (small_run(run_dir, curve.recipe) if small is None else small)
        return curve.check(live, total_steps=total_steps or max(p.step for p in points), tolerance=tolerance,
                           held=held)  # fmt: skip

    # -- the export gate ---------------------------------------------------------------------------
    def gate(
        self,
        data: str,
        *,
        limit_points: float = 1.0,
        task: str = "classification",
        input_field: str = "input",
        target_field: str = "target",
        metric: str | None = None,
        options: TaskOptions | None = None,
        max_examples: int | None = 200,
    ) -> Callable[[Sequence[tuple[str, Path]]], AccuracyGate]:
        """A check for the export: scores each ``(graph name, folder)`` on the same examples of
        ``data`` (``fp32`` first: the source; then e.g. ``onnx-int8``, ``onnx-int4``) and fails a
        graph whose metric is more than ``limit_points`` below the first's."""
        if limit_points < 0:
            raise BadInputError("the accuracy limit must be >= 0 points", field="eval_limit", hint="e.g. 1")
        # one example at a time for both: the latency ratio compares like with like (the graph runs unbatched)
        opts = replace(options or TaskOptions(batch_size=1), task=task)
        opts.check()
        ds = self.dataset(data, input_field=input_field, target_field=target_field, task=task, limit=max_examples)
        name = metric or HEADLINE[task]

        return partial(score_graphs, ds, opts, metric=name, limit_points=limit_points,
                       scratch=self.catalog.root / "evals" / ".gate")  # fmt: skip

    # -- as a job ------------------------------------------------------------------------------
    def job_spec(
        self,
        model: str,
        data: str,
        *,
        baselines: Sequence[str] = (),
        task: str = "classification",
        input_field: str = "input",
        target_field: str = "target",
        options: TaskOptions | None = None,
        limit: int | None = None,
        experiment: str | None = None,
        accelerator: str = "cpu",
        harness: bool = False,
        harness_task: str | Path | None = None,
    ) -> JobSpec:
        """The evaluation as a job of any backend: store models and the dataset are mounted."""
        opts = replace(options or TaskOptions(), task=task)
        opts.check()
        mounts = [m for m in [model, *baselines] if m.startswith("hf:")]
        if harness_task is not None:
            from ._harness import load_task_file

            if str(data or "").strip():
                raise BadInputError("an lm-eval task file names its own data; give --data or --harness-task, not both",
                                    field="harness_task", hint="drop --data")  # fmt: skip
            harness_task = str(Path(load_task_file(Path(harness_task)).folder or ".") / Path(harness_task).name)
        else:
            self.dataset(data, input_field=input_field, target_field=target_field, task=task, limit=1)  # fails now
            if not (os.sep in data or data.startswith(".")):
                mounts.append(data)
        params = {
            "model": model,
            "data": data,
            "baselines": list(baselines),
            "task": task,
            "input_field": input_field,
            "target_field": target_field,
            "options": opts.to_json(),
            "limit": limit,
            "harness": bool(harness),
            "harness_task": None if harness_task is None else str(Path(harness_task).resolve()),
        }
        return JobSpec(
            name="eval",
            code=_JOB,
            args=(json.dumps(params),),
            accelerator=accelerator,
            procs_per_node=1,
            mounts=tuple(dict.fromkeys(mounts)),
            experiment=experiment or "evals",
        )


def small_run(run_dir: Path, recipe: str) -> bool:
    """Whether the job of ``run_dir`` is a ``--small`` run of reproduction ``recipe``: its spec says
    ``STARVERSE_REFERENCE_CHECK=draw``, or it mounts the reproduction's toy model or generated data."""
    try:
        spec = json.loads((run_dir / "spec.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(spec, dict):
        return False
    raw_env = spec.get("env")
    env: dict[str, Any] = raw_env if isinstance(raw_env, dict) else {}
    if str(env.get("STARVERSE_REFERENCE_CHECK", "")).strip().lower() == "draw":
        return True
    from jupyter_starverse.recipes import get_recipe

    try:
        repro = get_recipe(recipe).reproduction
    except (BadInputError, NotFoundError):
        return False
    toys = {str(r).split("@")[0] for r in (repro.small_model, repro.small_data) if r} if repro else set()
    return any(str(m).split("@")[0] in toys for m in spec.get("mounts") or [])


# Runs inside the job: the same service, on the store the job sees; the table goes to the log.
_JOB = """\
import sys
from jupyter_starverse.evals.job import main
main(sys.argv[1])
"""
