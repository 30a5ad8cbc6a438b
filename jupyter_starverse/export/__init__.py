"""Export: a trained model to ONNX (fp32, weight-only INT8/INT4), with a parity report.

``ExportService`` (``client.export``) writes one KV-cache graph per model, quantizes its
weights, measures it against PyTorch (logits, greedy tokens, perplexity, CPU latency, the
team's feedback prompts) and stores it as a new model version with its lineage; a failed
parity check is not stored unless forced. TensorRT-LLM builds are rendered as GPU jobs.
"""

from __future__ import annotations

from ._onnx import GRAPH, OrtCausalLM
from ._report import HELD_OUT, PROMPTS, GraphFigures, Replay, Thresholds
from ._service import DEFAULT_THRESHOLDS, FORMATS, GPU_FORMATS, ExportResult, ExportService

__all__ = [
    "DEFAULT_THRESHOLDS",
    "FORMATS",
    "GPU_FORMATS",
    "GRAPH",
    "HELD_OUT",
    "PROMPTS",
    "ExportResult",
    "ExportService",
    "GraphFigures",
    "OrtCausalLM",
    "Replay",
    "Thresholds",
]
