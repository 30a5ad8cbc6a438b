"""Evaluation: score models on the team's own labelled data, against baselines and the chain.

``EvalService`` (``client.evals``) runs a store model, an experiment's output or an exported
ONNX version over a labelled store dataset (classification / extraction, question answering,
generation, perplexity), batched, with predictions written as they are made (a killed run
resumes), and stores one report per model with its lineage. ``gate`` is the export's accuracy
check; ``job_spec`` the same evaluation as a job of any backend.
"""

from __future__ import annotations

from ._curve import CurveCheck, Departure, ReferenceCurve
from ._metrics import LabelScore, classification_metrics, qa_metrics, rouge_l, token_f1
from ._predict import Predictor, load_predictor
from ._report import EvalChain, EvalErrors, EvalReport, EvalRun, ScoreCard, WrongExample
from ._run import TASKS, EvalProgress, Example, TaskOptions
from ._service import AccuracyGate, EvalService, GateFigure

__all__ = [
    "TASKS",
    "AccuracyGate",
    "CurveCheck",
    "Departure",
    "EvalChain",
    "EvalErrors",
    "EvalProgress",
    "EvalReport",
    "EvalRun",
    "EvalService",
    "Example",
    "GateFigure",
    "LabelScore",
    "Predictor",
    "ReferenceCurve",
    "ScoreCard",
    "TaskOptions",
    "WrongExample",
    "classification_metrics",
    "load_predictor",
    "qa_metrics",
    "rouge_l",
    "token_f1",
]
