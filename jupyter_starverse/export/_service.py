"""``export MODEL --format onnx|onnx-int8|onnx-int4``: graph, parity report, new store version.

One run: load the PyTorch model, export the fp32 KV-cache graph (or reuse the one an earlier
export of the same model files made with the same exporter versions: tracing is most of a small
model's export), measure it against PyTorch,
quantize (INT8/INT4 formats), measure that too, replay the team's feedback prompts, then
import the folder (graph, tokenizer, config, ``export_report.json``, ``starverse-lineage.json``) into
the store as a new revision of the model. A graph that fails its parity check is not imported
and the result says ``failed`` (Optimum only warns, and users shipped broken graphs), unless
the caller passes ``force=True``: then it is imported and marked ``overridden``.
TensorRT-LLM engines need an NVIDIA GPU and NVIDIA's own wheels: :meth:`ExportService.tensorrt_spec`
renders that build as a GPU job and refuses a CPU one.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from jupyter_starverse._format import pretty_text
from jupyter_starverse._settings import Settings
from jupyter_starverse.catalog import Catalog, ModelRef, parse_ref
from jupyter_starverse.errors import BackendUnavailableError, BadInputError, ConflictError
from jupyter_starverse.feedback import FeedbackService, resolve_model
from jupyter_starverse.jobmodel import JobSpec

from ._graphs import GRAPH_KEY, graph_key, graph_size, package, reuse_graph
from ._onnx import COMPUTE, GRAPH, OrtCausalLM, export_graph, load_torch, quantize_graph, quietly
from ._report import (
    GraphFigures,
    Replay,
    Thresholds,
    figures_html,
    figures_table,
    interleaved_latency,
    measure,
    reference,
    torch_greedy,
)

__all__ = ["DEFAULT_THRESHOLDS", "FORMATS", "GPU_FORMATS", "ExportResult", "ExportService"]

#: Format -> weight bits (None: fp32).
FORMATS: dict[str, int | None] = {"onnx": None, "onnx-int8": 8, "onnx-int4": 4}
GPU_FORMATS = ("tensorrt-llm",)
#: The fp32 graph must match PyTorch; quantized graphs may drift, within bounds.
DEFAULT_THRESHOLDS = {
    "onnx": Thresholds(max_abs_logit_diff=1e-4, min_greedy_agreement=1.0),
    "onnx-int8": Thresholds(min_greedy_agreement=0.9, max_perplexity_increase=0.05),
    "onnx-int4": Thresholds(min_greedy_agreement=0.8, max_perplexity_increase=0.15),
}
_REPLAY_PROMPTS = 32
#: The file recipe outputs carry their lineage in, so `starverse recipes lineage` reads exports too.
LINEAGE = "starverse-lineage.json"
_REPLAY_TOKENS = 24


@dataclass(frozen=True)
class ExportResult:
    """What an export did: state, where the graph went, and the report."""

    id: str
    model: str
    format: str
    state: str  # ok | failed | overridden
    target: str | None
    folder: str
    figures: tuple[GraphFigures, ...]
    failures: tuple[str, ...]
    lineage: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    accuracy: Any = None  # what an accuracy gate (``export --eval``) answered: to_json(), lines(), failures

    @property
    def ok(self) -> bool:
        return self.state != "failed"

    @property
    def base_bytes(self) -> int:
        return self.figures[0].bytes if self.figures else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "model": self.model,
            "format": self.format,
            "state": self.state,
            "target": self.target,
            "folder": self.folder,
            "figures": [f.to_json() for f in self.figures],
            "failures": list(self.failures),
            "lineage": self.lineage,
            "seconds": self.seconds,
            "accuracy": self.accuracy.to_json() if self.accuracy is not None else None,
        }

    @property
    def headline(self) -> str:
        where = f" -> {self.target}" if self.target else " (not stored)"
        return f"export {self.model} as {self.format}: {self.state}{where} in {self.seconds:.1f} s"

    def __str__(self) -> str:
        lines = [self.headline, figures_table(self.figures, self.base_bytes)]
        replay = self.figures[-1].replay if self.figures else None
        if replay is not None:
            lines.append(
                f"feedback replay ({replay.ref}): {replay.matching}/{replay.prompts} answers identical to PyTorch"
            )
        if self.accuracy is not None:
            lines += list(self.accuracy.lines())
        lines += [f"parity check failed: {f}" for f in self.failures]
        if self.state == "failed":
            lines.append("not stored; pass --force to store it anyway")
        lines.append(f"report: {Path(self.folder) / 'export_report.json'}")
        return "\n".join(lines)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))

    def _repr_html_(self) -> str:
        fails = "".join(f"<div style='color:#b00'>parity check failed: {f}</div>" for f in self.failures)
        table = figures_html(self.figures, self.base_bytes, "")
        return f"<div class='starverse-export'><b>{self.headline}</b>{table}{fails}</div>"


def _default_target(model: str, fmt: str) -> str:
    ref = parse_ref(model) if model.startswith("hf:") else None
    if not isinstance(ref, ModelRef):
        raise BadInputError(
            f"say where to store the export of {model!r}",
            field="target",
            hint="give --as ORG/REPO@REVISION (a store model gets REVISION-FORMAT by default)",
        )
    return f"hf:{ref.repo_id}@{ref.revision_key}-{fmt}"


class ExportService:
    """Exports of store models and experiment outputs (``client.export``)."""

    def __init__(self, settings: Settings, catalog: Catalog, feedback: FeedbackService) -> None:
        self.settings = settings
        self.catalog = catalog
        self.feedback = feedback

    def _target(self, model: str, fmt: str, target: str | None) -> ModelRef:
        text = target or _default_target(model, fmt)
        ref = parse_ref(text if text.startswith("hf:") else f"hf:{text}")
        assert isinstance(ref, ModelRef)
        if self.catalog.layout.read_manifest(ref) is not None:
            raise ConflictError(
                f"{ref} is already in the store", hint=f"choose another --as, or `starverse store rm {ref}`"
            )
        return ref

    def _replay(self, feedback: str, model: Any, tok: Any) -> Callable[[OrtCausalLM], Replay]:
        _, records = self.feedback.records(feedback)
        prompts = list(dict.fromkeys(r.prompt for r in records))[:_REPLAY_PROMPTS]

        def ids_of(prompt: str) -> list[int]:
            if getattr(tok, "chat_template", None):
                out = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True)
                out = out["input_ids"] if isinstance(out, dict) or hasattr(out, "input_ids") else out
                return [int(i) for i in out]
            return [int(i) for i in tok(prompt)["input_ids"]]

        encoded = [ids_of(p) for p in prompts]
        want = [torch_greedy(model, ids, _REPLAY_TOKENS, stop_at_eos=True)[0] for ids in encoded]

        def run(graph: OrtCausalLM) -> Replay:
            same = 0
            diffs: list[tuple[str, str, str]] = []
            for prompt, ids, ref_ids in zip(prompts, encoded, want, strict=True):
                got, _ = graph.greedy(ids, _REPLAY_TOKENS, stop_at_eos=True)
                if got == ref_ids:
                    same += 1
                elif len(diffs) < 3:
                    diffs.append(
                        (
                            prompt,
                            tok.decode(ref_ids, skip_special_tokens=True),
                            tok.decode(got, skip_special_tokens=True),
                        )
                    )
            return Replay(feedback, len(prompts), same, tuple(diffs))

        return run

    @quietly  # no transformers / torch.onnx deprecation warning reaches the user
    def export(
        self,
        model: str,
        fmt: str = "onnx",
        *,
        target: str | None = None,
        feedback: str | None = None,
        force: bool = False,
        thresholds: Thresholds | None = None,
        new_tokens: int = 16,
        progress: Callable[[str], None] | None = None,
        compute: str = "int8",
        gate: Callable[[list[tuple[str, Path]]], Any] | None = None,
        gate_formats: Sequence[str] = (),
    ) -> ExportResult:
        """Export ``model`` (``hf:ORG/REPO@REV``, ``exp:NAME``, a folder) to ``fmt`` with a parity report.

        ``gate`` (``client.evals.gate(DATASET)``) scores ``[("fp32", source), (fmt, exported folder)]``
        on the same examples before anything is stored; its failures for ``fmt`` fail the export
        like a parity check does (``force`` stores it anyway). ``gate_formats`` are scored beside
        it in the same call, quantized from the same fp32 graph (``("onnx-int8", "onnx-int4")``:
        fp32, INT8 and INT4 on the same examples); only ``fmt`` is stored and judged."""
        ref = self.check(model, fmt, target=target, new_tokens=new_tokens)
        for other in gate_formats:
            if other not in FORMATS:
                raise BadInputError(
                    f"unknown format {other!r} to score", field="eval_formats", hint=f"some of {', '.join(FORMATS)}"
                )
        if compute not in COMPUTE:
            raise BadInputError(f"unknown compute {compute!r}", field="compute", hint=f"one of {', '.join(COMPUTE)}")
        say = progress or (lambda text: None)
        started = time.monotonic()
        if feedback is not None:
            self.feedback.records(feedback)  # a wrong name fails now, not after the export
        source = resolve_model(self.settings, self.catalog, model)
        export_id = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]
        return self._run(
            model, fmt, ref, source, export_id, feedback, force, thresholds, new_tokens, say, started, compute, gate,
            tuple(gate_formats),
        )  # fmt: skip

    def check(self, model: str, fmt: str, *, target: str | None = None, new_tokens: int = 16) -> ModelRef:
        """Refuse a request that cannot work (format, target taken) before any work; the target ref."""
        if fmt in GPU_FORMATS:
            raise BadInputError(
                "TensorRT-LLM engines are built by a GPU job, not in this process",
                field="format",
                hint="`starverse export MODEL --format tensorrt-llm --gpu TYPE` (add --dry-run to see the job)",
            )
        if fmt not in FORMATS:
            raise BadInputError(
                f"unknown format {fmt!r}", field="format", hint=f"one of {', '.join([*FORMATS, *GPU_FORMATS])}"
            )
        if not 1 <= new_tokens <= 256:
            raise BadInputError("new_tokens must be 1..256", field="new_tokens", hint="e.g. 16")
        return self._target(model, fmt, target)

    def _run(
        self,
        model: str,
        fmt: str,
        ref: ModelRef,
        source: Path,
        export_id: str,
        feedback: str | None,
        force: bool,
        thresholds: Thresholds | None,
        new_tokens: int,
        say: Callable[[str], None],
        started: float,
        compute: str,
        gate: Callable[[list[tuple[str, Path]]], Any] | None = None,
        gate_formats: tuple[str, ...] = (),
    ) -> ExportResult:
        work = self.settings.home / "exports" / export_id
        say(f"loading {model}")
        torch_model, tok = load_torch(source)
        key = graph_key(source)
        reused = reuse_graph(work.parent, key, work / "onnx")
        if reused is not None:
            fp32 = work / "onnx" / GRAPH
            say(f"reusing the fp32 graph of export {reused} (the same model files and exporter)")
        else:
            say("exporting the fp32 graph with a KV cache")
            fp32 = export_graph(torch_model, work / "onnx")
        (work / "onnx" / GRAPH_KEY).write_text(json.dumps({"key": key}), encoding="utf-8")
        say("measuring PyTorch on the fixed prompts")
        ref_run = reference(torch_model, tok, new_tokens=new_tokens)
        replay = self._replay(feedback, torch_model, tok) if feedback is not None else None
        bits = FORMATS[fmt]
        limits = thresholds or DEFAULT_THRESHOLDS[fmt]
        base_limits = DEFAULT_THRESHOLDS["onnx"] if bits else limits
        say("checking the fp32 graph against PyTorch")
        figures = [
            measure(
                "onnx-fp32",
                OrtCausalLM(fp32, torch_model.config),
                graph_size(fp32),
                ref_run,
                base_limits,
                replay=None if bits else replay,
            )
        ]
        graph = fp32
        if bits:
            say(f"quantizing weights to INT{bits}")
            graph = quantize_graph(fp32, work / fmt, bits, compute=compute)
            say(f"checking the INT{bits} graph against PyTorch")
            figures.append(
                measure(fmt, OrtCausalLM(graph, torch_model.config), graph_size(graph), ref_run, limits, replay=replay)
            )
        say("timing PyTorch and the graphs in turns")
        graphs = [OrtCausalLM(fp32, torch_model.config)] + ([OrtCausalLM(graph, torch_model.config)] if bits else [])
        torch_ms, graph_ms = interleaved_latency(torch_model, graphs, ref_run.prompts, new_tokens=new_tokens)
        figures = [
            replace(f, ms_per_token=ms, ms_per_token_torch=torch_ms) for f, ms in zip(figures, graph_ms, strict=True)
        ]
        out = work / "package"
        package(source, graph, out)
        accuracy = None
        if gate is not None:
            accuracy = self._gate(gate, fmt, gate_formats, source, fp32, out, work, compute, say)
        failures = tuple(f for fig in figures for f in fig.failures) + tuple(
            accuracy.failures_of(fmt) if accuracy else ()
        )
        state = "ok" if not failures else ("overridden" if force else "failed")
        lineage = {
            "kind": "export",
            "source": model,
            "source_commit": self.catalog.status(model).commit if model.startswith("hf:") else None,
            "format": fmt,
            "feedback": feedback,
            "report": "export_report.json",
            "exported_at": time.time(),
            "user": self.settings.user,
            "compute": compute if bits else None,
            "parent": _read_lineage(source),  # what a recipe recorded about the source model
        }
        result = ExportResult(
            export_id,
            model,
            fmt,
            state,
            str(ref) if state != "failed" else None,
            str(work),
            tuple(figures),
            failures,
            lineage,
            0.0,
            accuracy,
        )
        if state != "failed":
            say(f"storing {ref}")
            result = replace(result, seconds=time.monotonic() - started)
            _write_report(out, result)
            self.catalog.import_model(out, repo=str(ref))
        result = replace(result, seconds=time.monotonic() - started)
        _write_report(work, result)
        return result

    def _gate(
        self,
        gate: Callable[[list[tuple[str, Path]]], Any],
        fmt: str,
        others: tuple[str, ...],
        source: Path,
        fp32: Path,
        out: Path,
        work: Path,
        compute: str,
        say: Callable[[str], None],
    ) -> Any:
        """The PyTorch model, the exported graph and ``others`` (from the same fp32 graph), in the
        order fp32, INT8, INT4, scored by ``gate`` on the same examples."""
        graphs: list[tuple[str, Path]] = [("fp32", source)]
        extra: list[Path] = []
        try:
            for name in [f for f in FORMATS if f == fmt or f in others]:
                if name == fmt:
                    graphs.append((fmt, out))
                    continue
                bits = FORMATS[name]
                say(f"quantizing a {name} graph to score beside {fmt}" if bits else "scoring the fp32 graph too")
                graph = quantize_graph(fp32, work / f"scored-{name}", bits, compute=compute) if bits else fp32
                folder = work / f"scored-{name}-package"
                package(source, graph, folder)
                extra += [folder, graph.parent] if bits else [folder]
                graphs.append((name, folder))
            say("scoring " + ", ".join(g for g, _ in graphs) + " on the same examples")
            return gate(graphs)
        finally:
            for folder in extra:  # copies scored for the table: only fmt's graph is kept
                shutil.rmtree(folder, ignore_errors=True)

    # -- TensorRT-LLM: a GPU job ---------------------------------------------------------------
    def tensorrt_spec(self, model: str, *, gpu: str | None, experiment: str | None = None) -> JobSpec:
        """The TensorRT-LLM engine build as a one-GPU job; refused without a GPU type."""
        if not gpu or gpu == "cpu":
            raise BackendUnavailableError(
                "a TensorRT-LLM engine can only be built on an NVIDIA GPU, with NVIDIA's tensorrt_llm wheels "
                "(they install from NVIDIA's own package index, not PyPI); this request has no GPU",
                hint="run `starverse export MODEL --format tensorrt-llm --gpu TYPE` to build it as a GPU job "
                "(--dry-run shows the job), or export --format onnx-int4 for CPUs",
            )
        if not model.startswith("hf:"):
            raise BadInputError(
                "a TensorRT-LLM build job mounts a store model",
                field="model",
                hint="import it first (`starverse store import-model PATH --as ORG/REPO`), give hf:ORG/REPO@REV",
            )
        self.catalog.entry(model)  # NotFoundError when it is not in the store
        return JobSpec(
            name="trtllm-build",
            code=_TRTLLM_BUILD,
            args=(model,),
            accelerator=gpu,
            procs_per_node=1,
            mounts=(model,),
            experiment=experiment or "exports",
        )


# Runs inside the GPU job: the model is mounted; the engine goes to the run folder.
_TRTLLM_BUILD = """\
import os, sys, json
try:
    from tensorrt_llm import LLM
except ImportError:
    sys.exit("tensorrt_llm is not in the job image: "
             "pip install --extra-index-url https://pypi.nvidia.com tensorrt-llm")
from jupyter_starverse.runtime import mount_path
src = mount_path(sys.argv[1])
out = os.path.join(os.environ["STARVERSE_EXPERIMENT_DIR"], "output", "engine")
LLM(model=str(src)).save(out)
print(json.dumps({"engine": out}))
"""


def _write_report(folder: Path, result: ExportResult) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / ".export_report.json.tmp"
    tmp.write_text(json.dumps(result.to_json(), indent=2, ensure_ascii=False), encoding="utf-8")
    tmp.replace(folder / "export_report.json")
    (folder / LINEAGE).write_text(json.dumps(result.lineage, indent=2, ensure_ascii=False), encoding="utf-8")


def _read_lineage(folder: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((folder / LINEAGE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
