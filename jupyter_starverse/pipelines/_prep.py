"""A pipeline's data preparation node as a job: where it runs, what it writes, the JobSpec.

A prep node runs in the driver's process (``client.data``, as before) when its backend is
``local`` and it has no ``shards``; anywhere else, and in every export, it is a job of
``shards`` ranks running ``python -m jupyter_starverse.data._job`` (the data service's step,
sharded, publishing the new version from rank 0). Its source and target are store
references, resolved by the job on the shared store, so a prep job can read what the prep job
before it writes: on Slurm the two are chained with ``afterok`` without waiting.
"""

from __future__ import annotations

from jupyter_starverse.data._job import job_spec, parse_shards
from jupyter_starverse.errors import BadInputError
from jupyter_starverse.jobmodel import JobSpec
from jupyter_starverse.jobmodel._spec import job_name_of

from ._model import Node, Pipeline
from ._records import PrepPlan

__all__ = ["prep_backend", "prep_job_spec", "prep_output", "prep_target", "runs_as_job", "writes_version"]


def prep_backend(pipeline: Pipeline, node: Node) -> str:
    backend = str(node.params.get("backend") or pipeline.backend)
    if backend not in ("local", "slurm", "kubernetes"):
        raise BadInputError(f"step {node.id}: backend {backend!r} is unknown", field="backend",
                            hint="local, slurm or kubernetes")  # fmt: skip
    return backend


def shards_of(node: Node, step: str) -> tuple[int, int]:
    value = node.params.get("shards")
    if value in (None, ""):
        return 1, 1
    try:
        return parse_shards(value, step=step)
    except BadInputError as e:
        raise BadInputError(f"step {node.id}: {e.message}", field="shards", hint=e.hint) from None


def runs_as_job(pipeline: Pipeline, node: Node) -> bool:
    """False: the driver runs the step itself (local, no shards); True: it is a job."""
    return prep_backend(pipeline, node) != "local" or node.params.get("shards") not in (None, "")


def prep_target(source: str, step: str, tag: str, node_id: str) -> str:
    """The version a prep step writes: one per run (``tag``) and node."""
    return f"{source.split('@')[0]}@{step}-{tag}-{node_id}"


def writes_version(step: object) -> bool:
    """Whether a prep step writes a new version: every step but ``scan``, which only reports PII."""
    return step != "scan"


def prep_output(source: str, step: str, target: str) -> str:
    """What the steps after a prep step read: the version it writes, or its source when it writes none."""
    return target if writes_version(step) else source


def prep_job_spec(pipeline: Pipeline, node: Node, prep: PrepPlan, *, source: str, target: str,
                  backend: str) -> JobSpec:  # fmt: skip
    """The job of a prep node on ``backend``: ``shards`` ranks of the data step's entry point."""
    to = target if writes_version(prep.step) else None
    return job_spec(prep.step, source, to=to, options=dict(prep.options), shards=shards_of(node, prep.step),
                    backend=backend, name=job_name_of(f"{pipeline.name}-{node.id}"),
                    display_name=f"{pipeline.name}: {node.id} ({prep.step})")  # fmt: skip
