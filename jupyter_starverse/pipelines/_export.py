"""A pipeline as files someone can read and run: sbatch scripts, Kubernetes YAML, a Python script.

Every job text comes from the facade's ``preview`` (the renderer ``starverse launch --dry-run``
uses), so an export says exactly what ``pipeline run`` would start. What is added here is only
the order: ``submit.sh`` chains the sbatch scripts with ``--dependency=afterok``, the YAML lists
the jobs in order, and the Python script runs the same pipeline through the API.
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_starverse._format import pretty_text
from jupyter_starverse._version import __version__
from jupyter_starverse.errors import BadInputError
from jupyter_starverse.experiments import ExperimentPaths
from jupyter_starverse.jobmodel import JobSpec

from ._evalstep import eval_job_spec
from ._model import Pipeline
from ._plan import plan
from ._prep import prep_job_spec, prep_output, prep_target, writes_version
from ._records import StepPlan

if TYPE_CHECKING:
    from ._facade import Facade

__all__ = ["EXPORT_FORMATS", "ExportFile", "PipelineExport", "export"]

EXPORT_FORMATS = ("sbatch", "yaml", "python")
_PLACEHOLDER = "<job-id>"  # what the renderers write where a submitted job has its id
# submit.sh: the submission's stamp, in the versions prep steps write (itself a valid version
# name, so the rendered JobSpec passes its own checks before sed fills it in)
_PLACEHOLDER_RUN = "runSUBMITSTAMP"


@dataclass(frozen=True)
class ExportFile:
    """One exported file: its name in the export folder, text and whether it is executable."""

    name: str
    text: str
    executable: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "text": self.text, "executable": self.executable}


@dataclass(frozen=True)
class PipelineExport:
    """The files of one export format; ``main`` is the one to run (``submit.sh``, the YAML, the script)."""

    name: str
    format: str
    files: tuple[ExportFile, ...]
    written: tuple[str, ...] = ()  # where ``write`` put them

    @property
    def main(self) -> ExportFile:
        return self.files[0]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "format": self.format, "files": [f.to_json() for f in self.files],
                "written": list(self.written)}  # fmt: skip

    def __str__(self) -> str:
        if len(self.files) == 1:
            return self.main.text.rstrip()
        return "\n".join(f"# ==> {f.name} <==\n{f.text.rstrip()}\n" for f in self.files).rstrip()

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))

    def write(self, folder: Path) -> PipelineExport:
        """Write every file into ``folder`` (each through a temp file and a rename)."""
        folder.mkdir(parents=True, exist_ok=True)
        written = []
        for f in self.files:
            target = folder / f.name
            tmp = target.with_name(f".{target.name}.tmp")
            tmp.write_text(f.text)
            tmp.chmod(0o755 if f.executable else 0o644)
            tmp.replace(target)
            written.append(str(target))
        return PipelineExport(self.name, self.format, self.files, tuple(written))


def export(pipeline: Pipeline, facade: Facade, *, fmt: str, base_dir: Path) -> PipelineExport:
    """``pipeline`` as ``sbatch`` (submit.sh + one script per step), ``yaml`` (Kubernetes) or ``python``."""
    if fmt not in EXPORT_FORMATS:
        raise BadInputError(f"export format {fmt!r} is unknown", field="format",
                            hint=f"use one of {', '.join(EXPORT_FORMATS)}")  # fmt: skip
    steps = plan(pipeline, facade, base_dir=base_dir)
    if fmt == "python":
        return PipelineExport(pipeline.name, fmt, (_python(pipeline, base_dir),))
    backend = "slurm" if fmt == "sbatch" else "kubernetes"
    tag = _PLACEHOLDER_RUN if fmt == "sbatch" else time.strftime("%y%m%d-%H%M%S", time.gmtime())
    specs = _specs(pipeline, steps, backend, tag, facade)
    if fmt == "yaml":
        return PipelineExport(pipeline.name, fmt, (_yaml(pipeline, steps, specs, facade),))
    scripts = [ExportFile(f"{s.node}.sbatch", facade.preview(specs[s.node], backend="slurm", output="sbatch").rendered)
               for s in steps]  # fmt: skip
    return PipelineExport(pipeline.name, fmt, (_submit(pipeline, steps, specs, facade), *scripts))


def _specs(pipeline: Pipeline, steps: list[StepPlan], backend: str, tag: str, facade: Facade) -> dict[str, JobSpec]:
    """Every step's job; a prep step is a job of its shards (pipelines/_prep.py) reading store references.

    The version a prep step writes is named by ``tag`` (sbatch: the submission's stamp, filled in
    by submit.sh), so the prep step after it reads it without waiting to learn its name. A training
    step fed by a prep step reads that version by its store folder, known before it exists
    (:func:`_reads_prepared`), and so does an eval step (:func:`_eval_reads_prepared`); a recipe
    step, which names its datasets to the recipe, is refused with what to do instead.
    """
    out: dict[str, JobSpec] = {}
    targets: dict[str, str] = {}
    for step in steps:
        node = pipeline.by_id[step.node]
        if step.prep is None:
            fed = [n.id for n in pipeline.inputs(step.node) if n.kind == "prep"]
            if fed and node.kind not in ("train", "eval"):
                raise BadInputError(
                    f"step {step.node} ({node.kind}) names the data {fed[0]} prepares to its recipe, and that "
                    "version does not exist before the pipeline runs, so an export cannot render it",
                    field="format",
                    hint=f"run it (`starverse pipeline run FILE --backend {backend}` gives the recipe the "
                    f"version {fed[0]} wrote), or export the preparation steps alone and point the recipe "
                    "step at the version they wrote",
                )
            if step.evaluation is not None:  # an eval step is a job in every export, after the one it scores
                spec = eval_job_spec(pipeline, node, step.evaluation, facade)
                out[step.node] = _eval_reads_prepared(pipeline, step.evaluation, spec, targets, facade)
                continue
            assert step.spec is not None
            out[step.node] = _reads_prepared(pipeline, node, step.spec, targets, facade) if fed else step.spec
            continue
        prep = step.prep
        source = targets.get(prep.from_node or "", prep.source)
        target = prep_target(source, prep.step, tag, step.node)
        targets[step.node] = prep_output(source, prep.step, target)
        out[step.node] = prep_job_spec(pipeline, node, prep, source=source, target=target,
                                       backend=backend)  # fmt: skip
    return out


def _reads_prepared(pipeline: Pipeline, node: Any, spec: JobSpec, targets: dict[str, str], facade: Facade) -> JobSpec:
    """A training step's job that reads the versions its prep steps write, by their store folders.

    The plan mounts a prep step's source as a stand-in (the version does not exist yet). Here the
    stand-in is dropped and the step gets the folder the version will have once published
    (``DATA_PATH`` for its first dataset, ``DATA_PATH_<STEP>`` for each prep step it reads): a
    dataset version's folder is a function of its name and version on the shared store, and the
    job starts only after the prep job succeeded (afterok; the wait container on Kubernetes).
    """
    from ._plan import data_inputs

    env = dict(spec.env)
    drop: set[str] = set()
    keep: set[str] = set()
    first = True
    for kind, ref, prep_node in data_inputs(pipeline, node, {}):
        if kind != "dataset":
            continue
        if prep_node is None:
            keep.add(ref)
            first = False
            continue
        drop.add(ref)
        target = targets.get(prep_node)
        prep = pipeline.by_id[prep_node]
        if target is None or not writes_version(prep.params.get("step")):  # its source is the data
            keep.add(ref)
            first = False
            continue
        folder = _prepared_folder(target, facade)
        env[f"DATA_PATH_{''.join(c if c.isalnum() else '_' for c in prep_node).upper()}"] = folder
        if first:
            env["DATA_PATH"] = folder  # the plan gave it the stand-in's folder
        first = False
    mounts = tuple(m for m in spec.mounts if m not in drop or m in keep)
    return replace(spec, mounts=mounts, env=env)


def _prepared_folder(target: str, facade: Facade) -> str:
    """The store folder the version ``target`` (``NAME@VERSION``) will have once its prep step published it."""
    from jupyter_starverse.catalog import DatasetRef, parse_ref

    parsed = parse_ref(target)
    assert isinstance(parsed, DatasetRef)
    return str(facade.catalog.layout.data_dir(DatasetRef(parsed.name, parsed.version)))


def _eval_reads_prepared(pipeline: Pipeline, ev: Any, spec: JobSpec, targets: dict[str, str],
                         facade: Facade) -> JobSpec:  # fmt: skip
    """An eval step's job that scores on the version its prep step writes, read from its store folder.

    The plan checked the fields on the prep step's source (the stand-in); the job reads the folder
    the new version will have (a path: nothing to mount), and starts after the prep job succeeded.
    A scan step writes nothing: its source is the data, and the job keeps it.
    """
    prep_node = ev.data_from
    target = targets.get(prep_node or "")
    if prep_node is None or target is None or not writes_version(pipeline.by_id[prep_node].params.get("step")):
        return spec
    params = json.loads(spec.args[0])
    params["data"] = _prepared_folder(target, facade)
    mounts = tuple(m for m in spec.mounts if m != ev.data)
    return replace(spec, args=(json.dumps(params), *spec.args[1:]), mounts=mounts)


def _submit(pipeline: Pipeline, steps: list[StepPlan], specs: dict[str, JobSpec], facade: Facade) -> ExportFile:
    """``submit.sh``: each step's script with a fresh job id, after the steps it waits for (afterok)."""
    experiments = facade.settings.experiments
    lines = [
        "#!/bin/bash",
        f"# Submit the pipeline {_line(pipeline.name)!r} to Slurm (jupyter_starverse {__version__}).",
        "# Each step's sbatch script (beside this file) is what `starverse launch --backend slurm",
        "# --dry-run` renders; this script gives it a job id (STARVERSE_SUBMIT_ID), makes its run folder and",
        "# submits it with --dependency=afterok on the steps it waits for: a step starts only when they succeeded.",
        "# `starverse pipeline run FILE --backend slurm` does the same and records the jobs for",
        "# `starverse jobs`; use this file where starverse is not installed on the submit host.",
        "set -euo pipefail",
        'here=$(cd "$(dirname "$0")" && pwd)',
        'stamp=$(date -u +%Y%m%d-%H%M%S)-$(printf "%04x" $((RANDOM % 65536)))',
        "",
    ]
    var = {s.node: f"sid_{i}" for i, s in enumerate(steps)}
    for i, step in enumerate(steps):
        spec = specs[step.node]
        run = ExperimentPaths.of(experiments, spec.experiment_name).run(_PLACEHOLDER).root
        folder = str(run).replace(_PLACEHOLDER, f'"$id_{i}"')
        deps = ":".join(f"${{{var[a]}}}" for a in step.after)
        depend = f" --dependency=afterok:{deps} --kill-on-invalid-dep=yes" if deps else ""
        lines += [
            f"# step {step.node}: {spec.nodes} node(s) x {spec.procs_per_node}"
            + (f", after {', '.join(step.after)}" if step.after else ""),
            f'id_{i}={shlex.quote(spec.name)}-"$stamp"',
            f"mkdir -p {_quote_path(folder)}/logs",
            f'{var[step.node]}=$(sed -e "s/{_PLACEHOLDER_RUN}/run$stamp/g" '
            f'"$here"/{shlex.quote(step.node + ".sbatch")} '
            f"| sbatch --parsable{depend} --export=ALL,STARVERSE_SUBMIT_ID=\"$id_{i}\" | cut -d';' -f1)",
            f'echo "{step.node}: Slurm job ${{{var[step.node]}}} (run folder {_line(str(run))})"'.replace(
                _PLACEHOLDER, f"$id_{i}"
            ),
            "",
        ]
    return ExportFile("submit.sh", "\n".join(lines), executable=True)


def _quote_path(text_with_var: str) -> str:
    """Double-quote a path that holds one ``"$id_N"`` expansion, escaping what double quotes expand."""
    parts = text_with_var.split('"')
    out = []
    for i, part in enumerate(parts):
        if i % 2 == 1:  # the "$id_N" piece
            out.append(part)
        else:
            out.append(part.replace("\\", "\\\\").replace("$", "\\$").replace("`", "\\`"))
    return '"' + "".join(out) + '"'


def _line(text: str) -> str:
    return " ".join(text.split()).replace('"', "'").replace("$", "").replace("`", "'")


def _yaml(pipeline: Pipeline, steps: list[StepPlan], specs: dict[str, JobSpec], facade: Facade) -> ExportFile:
    """Every step's Kubernetes objects, applicable at once: scripts in ConfigMaps, each step's pods
    waiting for the Jobs before it (pipelines/_kube.py)."""
    import yaml

    from ._kube import applicable

    rendered = []
    for step in steps:
        text = facade.preview(specs[step.node], backend="kubernetes", output="yaml").rendered
        objs = [d for d in yaml.safe_load_all(text) if d]
        rendered.append((step.node, step.after, specs[step.node], bool(specs[step.node].store_writes), objs))
    head = [
        f"# The pipeline {_line(pipeline.name)!r} on Kubernetes (jupyter_starverse {__version__}): one Job per",
        "# step. Apply the whole file at once (kubectl apply -f FILE): each step's pods wait in an init",
        "# container until the Jobs it comes after completed, and fail when one failed (like afterok).",
        "# Steps: " + "; ".join(f"{s.node} ({'after ' + ', '.join(s.after) if s.after else 'first'})" for s in steps),
    ]
    body = "---\n".join(yaml.safe_dump(o, sort_keys=False, width=200) for o in applicable(_stem(pipeline), rendered))
    return ExportFile(f"{_stem(pipeline)}.yaml", "\n".join(head) + "\n---\n" + body)


def _python(pipeline: Pipeline, base_dir: Path) -> ExportFile:
    """A script that runs the same pipeline through the API (``client.pipelines.run``)."""
    doc = json.dumps(pipeline.to_json(), indent=4, sort_keys=True, ensure_ascii=False)
    text = f'''"""Run the pipeline {pipeline.name!r} through the jupyter_starverse API.

Each step starts when the steps it waits for succeeded (Slurm: --dependency=afterok),
exactly as `starverse pipeline run` does. Written by jupyter_starverse {__version__}.
"""

import json
import sys
from pathlib import Path

from jupyter_starverse.client import Starverse
from jupyter_starverse.pipelines import Pipeline

PIPELINE = json.loads(r"""
{doc}
""")
# Relative script paths in the steps are read from here (the pipeline file's folder).
BASE_DIR = Path({str(base_dir)!r})

if __name__ == "__main__":
    client = Starverse()
    run = client.pipelines.run(Pipeline.from_json(PIPELINE), base_dir=BASE_DIR, wait=True)
    print(run)
    sys.exit(0 if run.state == "succeeded" else 1)
'''
    return ExportFile(f"{_stem(pipeline)}.py", text, executable=True)


def _stem(pipeline: Pipeline) -> str:
    from jupyter_starverse.jobmodel._spec import job_name_of

    return job_name_of(pipeline.name)
