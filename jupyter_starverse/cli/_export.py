"""``starverse export MODEL --format onnx|onnx-int8|onnx-int4|tensorrt-llm`` (and ``%sv export``).

ONNX formats run here (CPU) and print the parity report; the graph becomes the store model
``--as ORG/REPO@REV`` (default for a store model: the same repo, revision ``REV-FORMAT``). A
failed parity check stores nothing and exits 4 unless ``--force``. ``tensorrt-llm`` is a GPU
job: ``--gpu TYPE`` launches it (``--dry-run`` shows it); without a GPU it is refused.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ._common import add_json_flag

if TYPE_CHECKING:
    from jupyter_starverse.client import Starverse

__all__ = ["register"]


def _export(client: Starverse, args: argparse.Namespace) -> object:
    from jupyter_starverse.errors import ConflictError
    from jupyter_starverse.export import GPU_FORMATS

    if args.format in GPU_FORMATS:
        gpu = args.gpu or (client.default_accelerator() if client.default_accelerator() != "cpu" else None)
        spec = client.export.tensorrt_spec(args.model, gpu=gpu, experiment=args.experiment)
        backend = client.backend(args.backend)
        if args.dry_run:
            return client.preview(spec, backend=backend)
        return client.launch(spec, backend=backend)
    gate = None
    scored: tuple[str, ...] = ()
    if args.eval:  # the accuracy gate: fp32, the export and --eval-formats scored on the same examples
        scored = tuple(f.strip() for f in args.eval_formats.split(",") if f.strip() and f.strip() != args.format)
        gate = client.evals.gate(
            args.eval, limit_points=args.eval_limit, task=args.eval_task, input_field=args.input_field,
            target_field=args.target_field, max_examples=args.eval_examples,
        )  # fmt: skip
    status = args.presenter.status()
    try:
        result = client.export.export(
            args.model, args.format, target=args.target, feedback=args.feedback, force=args.force,
            new_tokens=args.new_tokens, progress=status.update, compute=args.compute, gate=gate, gate_formats=scored,
        )  # fmt: skip
    finally:
        status.close()
    if result.state == "failed":
        raise ConflictError(str(result), hint="fix the model, or pass --force to store the graph anyway")
    return result


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from ._names import EXPORT_FORMATS as FORMATS
    from ._names import EXPORT_GPU_FORMATS as GPU_FORMATS

    p = sub.add_parser(
        "export",
        help="export a model to ONNX (fp32, INT8, INT4) with a parity report, or build a TensorRT-LLM engine",
        description="Export MODEL (hf:ORG/REPO@REV, exp:EXPERIMENT or a model folder) and store the result.",
    )
    p.add_argument("model", metavar="MODEL")
    p.add_argument("--format", choices=(*FORMATS, *GPU_FORMATS), default="onnx", help="default: onnx (fp32)")
    p.add_argument("--as", dest="target", default=None, metavar="ORG/REPO@REV", help="the new store model")
    p.add_argument("--feedback", default=None, metavar="LOG[@N]", help="replay this feedback's prompts in the report")
    p.add_argument("--force", action="store_true", help="store the graph even if its parity check fails")
    p.add_argument("--compute", choices=("int8", "fp32"), default="int8",
                   help="how quantized MatMuls compute: int8 (fast CPU kernels, default) or fp32")  # fmt: skip
    p.add_argument("--new-tokens", type=int, default=16, metavar="N", help="greedy tokens per prompt (default 16)")
    e = p.add_argument_group("accuracy gate")
    e.add_argument(
        "--eval",
        default=None,
        metavar="DATASET[@V]",
        help="score fp32, INT8 and INT4 on the same examples of this labelled set",
    )
    e.add_argument("--eval-limit", type=float, default=1.0, metavar="POINTS",
                   help="refuse a drop of the metric larger than this (default 1 point)")  # fmt: skip
    e.add_argument(
        "--eval-task", choices=("classification", "extraction", "qa", "generation"), default="classification"
    )
    e.add_argument("--eval-formats", default="onnx-int8,onnx-int4", metavar="F1,F2",
                   help="also score these formats (quantized from the same fp32 graph; only --format is stored "
                   "and judged); default: fp32, INT8 and INT4 in one call; '' for --format alone")  # fmt: skip
    e.add_argument("--eval-examples", type=int, default=200, metavar="N", help="examples scored (default 200)")
    e.add_argument("--input-field", default="input", help="input field of --eval (default: input)")
    e.add_argument("--target-field", default="target", help="expected field of --eval (default: target)")
    g = p.add_argument_group("tensorrt-llm (a GPU job)")
    g.add_argument("--gpu", default=None, metavar="TYPE", help="GPU type of the build job")
    g.add_argument("--backend", default=None, help="local, kubernetes or slurm (default: settings)")
    g.add_argument("--experiment", default=None, help="experiment of the build job (default: exports)")
    g.add_argument("--dry-run", action="store_true", help="show the build job; start nothing")
    add_json_flag(p)
    p.set_defaults(run=_export)
