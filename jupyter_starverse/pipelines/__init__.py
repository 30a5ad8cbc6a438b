"""Pipelines: a graph of steps (data preparation, training, alignment, export) run as jobs with dependencies.

A ``.svpipeline`` file (JSON) holds catalog entries and steps; ``client.pipelines`` checks it
(issues pinned to nodes, the whole cost), exports it (sbatch, Kubernetes YAML, Python, all
rendered by the backends' own renderers) and runs it (each step after the steps it waits for).
"""

from __future__ import annotations

from ._export import EXPORT_FORMATS, ExportFile, PipelineExport
from ._model import ENTRY_KINDS, FORMAT_VERSION, STEP_KINDS, Edge, Node, Pipeline
from ._records import Issue, PipelineCheck, StepCost, StepPlan
from ._run import PipelineRun, StepRun
from ._service import PipelineService, load

__all__ = [
    "ENTRY_KINDS",
    "EXPORT_FORMATS",
    "FORMAT_VERSION",
    "STEP_KINDS",
    "Edge",
    "ExportFile",
    "Issue",
    "Node",
    "Pipeline",
    "PipelineCheck",
    "PipelineExport",
    "PipelineRun",
    "PipelineService",
    "StepCost",
    "StepPlan",
    "StepRun",
    "load",
]
