"""A pipeline's evaluation node: in the driver (local) or as a job (elsewhere, and in every export).

On the local backend an ``eval`` step is ``client.evals.evaluate`` run by the driver, after the
step it scores succeeded; on Slurm or Kubernetes, and in exports, it is the job ``starverse eval
--job`` submits (``client.evals.job_spec``), chained after the training job like any step. Either
way the report lands on the store (``starverse eval ls``, ``store show MODEL``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jupyter_starverse.jobmodel import JobSpec
from jupyter_starverse.jobmodel._spec import job_name_of

from ._model import Node, Pipeline
from ._records import EvalPlan

if TYPE_CHECKING:
    from ._facade import Facade

__all__ = ["eval_job_spec", "evaluate_here"]


def eval_job_spec(pipeline: Pipeline, node: Node, ev: EvalPlan, facade: Facade, *, data: str | None = None) -> JobSpec:
    """The job of an eval node: the evaluation service on the store the job sees."""
    spec = facade.evals.job_spec(ev.model, data or ev.data, **ev.options(),
                                 experiment=str(node.params.get("experiment") or "evals"),
                                 accelerator=str(node.params.get("gpu") or "cpu"))  # fmt: skip
    return spec.replace(name=job_name_of(f"{pipeline.name}-{node.id}"),
                        display_name=f"{pipeline.name}: {node.id} (eval)")  # fmt: skip


def evaluate_here(facade: Facade, ev: EvalPlan, *, data: str | None = None) -> str:
    """Score the model in this process; the line the run shows (report id and headline metric)."""
    report = facade.evals.evaluate(ev.model, data or ev.data, **ev.options()).report
    return f"{report.model}: report {report.line()}"
