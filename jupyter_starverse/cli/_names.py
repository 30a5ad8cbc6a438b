"""The names the parsers offer as choices, so that building a group's parser imports no service.

``starverse GROUP --help`` builds only that group's parser; reading these from the services
(``jupyter_starverse.data``, ``.evals``, ``.export``, ...) would import each service whole, most
of a ``--help``'s time. ``tests/cli/test_help_imports.py`` keeps every name here equal to the
service's own, so a new step, task or format fails that test until it is added here.
"""

from __future__ import annotations

__all__ = [
    "BACKENDS",
    "DATA_STEPS",
    "EVAL_TASKS",
    "EXPORT_FORMATS",
    "EXPORT_GPU_FORMATS",
    "FEEDBACK_EXPORT_KINDS",
    "KUBE_KINDS",
    "PII_ACTIONS",
    "PII_TYPES",
    "PIPELINE_EXPORT_FORMATS",
]

BACKENDS = ("local", "kubernetes", "slurm")  # _settings.BACKENDS
KUBE_KINDS = ("job", "jobset", "trainjob", "pytorchjob")  # _settings.KUBE_KINDS
PII_TYPES = ("id_card", "mobile", "email", "bank_card", "ip", "phone", "person", "place")  # data.PII_TYPES
PII_ACTIONS = ("mask", "keep_last4", "hash", "placeholder", "truncate_ip", "keep", "drop")  # data.ACTIONS
DATA_STEPS = ("scan", "clean", "dedup", "score")  # data.STEPS
EVAL_TASKS = ("classification", "extraction", "qa", "generation", "perplexity")  # evals.TASKS
EXPORT_FORMATS = ("onnx", "onnx-int8", "onnx-int4")  # export.FORMATS (its keys)
EXPORT_GPU_FORMATS = ("tensorrt-llm",)  # export.GPU_FORMATS
FEEDBACK_EXPORT_KINDS = ("pairs", "labels", "records")  # feedback.EXPORT_KINDS
PIPELINE_EXPORT_FORMATS = ("sbatch", "yaml", "python")  # pipelines.EXPORT_FORMATS
