"""Export a tiny Llama from the store to ONNX with a KV cache: parity report, gate, new store version."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from jupyter_starverse.client import Starverse
from jupyter_starverse.errors import BackendUnavailableError, BadInputError, ConflictError, NotFoundError
from jupyter_starverse.evals import AccuracyGate, GateFigure
from jupyter_starverse.export import GRAPH, OrtCausalLM, Thresholds


def _feedback(client: Starverse) -> None:
    for prompt, vote in (
        ("How many cards do I need?", "up"),
        ("训练一个大模型", "down"),
        ("How many cards do I need?", "down"),
    ):
        client.feedback.record("team", model="hf:team/tiny@main", prompt=prompt, answer="two nodes", vote=vote)


@pytest.mark.slow
def test_int4_export_passes_parity_and_becomes_a_store_version(client: Starverse, tiny_ref: str) -> None:
    _feedback(client)
    version = client.feedback.snapshot("team").ref
    labelled = client.catalog.root.parent / "gold"  # export --eval: fp32 and INT4 scored on the same examples
    labelled.mkdir()
    rows = [{"input": t, "target": "yes" if i % 2 else "no"} for i, t in enumerate(("a fox", "a dog", "模型", "data"))]
    (labelled / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    gold = client.catalog.add_dataset("gold", str(labelled)).ref
    gate = client.evals.gate(gold, limit_points=100.0)  # a random tiny model: only the figures are checked here
    result = client.export.export(tiny_ref, "onnx-int4", feedback=version, gate=gate, gate_formats=("onnx-int8",))
    assert result.state == "ok" and result.target == "hf:team/tiny@main-onnx-int4"
    base, int8, quant = result.accuracy.figures  # fp32, INT8 and INT4 on the same examples in one call
    assert (base.graph, int8.graph, quant.graph) == ("fp32", "onnx-int8", "onnx-int4") and quant.ms_per_example > 0
    assert f"INT8: F1 {0.0 - int8.drop_points:+.1f} points, latency x" in str(result)
    assert f"INT4: F1 {0.0 - quant.drop_points:+.1f} points, latency x" in str(result)
    assert not list(Path(result.folder).glob("scored-*"))  # the INT8 graph was scored, not kept
    scored = client.evals.evaluate(result.target, gold)  # the stored INT4 version, run by onnxruntime
    assert scored.report.engine == "onnxruntime" and scored.report.examples == 4
    fp32, int4 = result.figures
    # the fp32 graph computes what PyTorch computes, through the prefill and the cached decode
    assert fp32.max_abs_logit_diff <= 1e-4 and fp32.greedy_agreement == 1.0 and fp32.exact_continuations == 1.0
    assert abs(fp32.perplexity_change) < 1e-4
    assert int4.bytes < fp32.bytes and int4.ms_per_token > 0 and fp32.ms_per_token > 0
    assert int4.replay is not None and (int4.replay.ref, int4.replay.prompts) == (version, 2)
    assert 0 <= int4.replay.matching <= 2
    # what went to the store: the INT4 graph (MatMulNBits), tokenizer, report and lineage
    folder = client.catalog.mount(result.target)
    report = json.loads((folder / "export_report.json").read_text())
    assert report["state"] == "ok" and report["figures"][1]["graph"] == "onnx-int4"
    lineage = client.recipes.lineage(result.target).to_json()  # the same file recipe outputs carry
    assert json.dumps(lineage).count(tiny_ref) >= 1
    recorded = json.loads((folder / "starverse-lineage.json").read_text())
    assert recorded["source"] == tiny_ref and recorded["feedback"] == version and recorded["format"] == "onnx-int4"
    assert recorded["source_commit"] == client.catalog.status(tiny_ref).commit
    import onnx

    ops = {n.op_type for n in onnx.load(str(folder / GRAPH), load_external_data=False).graph.node}
    assert "MatMulNBits" in ops
    # it generates with the KV cache on its own (past_key_values in, present out)
    from transformers import AutoConfig, AutoTokenizer

    graph = OrtCausalLM(folder / GRAPH, AutoConfig.from_pretrained(folder))
    names = {i.name for i in graph.session.get_inputs()}
    assert {"past_key_values.0.key", "past_key_values.1.value"} <= names
    ids = AutoTokenizer.from_pretrained(folder)("The quick brown fox")["input_ids"]
    logits, past = graph.step(np.array([ids]), None)
    assert logits.shape[:2] == (1, len(ids))
    assert past["past_key_values.0.key"].shape[2] == len(ids)
    tokens, times = graph.greedy(ids, 5)
    assert len(tokens) == 5 and len(times) == 5
    text = str(result)
    assert "onnx-int4" in text and "greedy agree" in text and "feedback replay" in text


@pytest.mark.slow
def test_a_failed_parity_check_is_not_stored_unless_forced(client: Starverse, tiny_ref: str) -> None:
    strict = Thresholds(max_abs_logit_diff=1e-12)  # no float32 graph is that close to PyTorch
    failed = client.export.export(tiny_ref, "onnx", thresholds=strict, new_tokens=4)
    assert failed.state == "failed" and failed.target is None and not failed.ok
    assert any("max abs logit diff" in f for f in failed.failures)
    assert "not stored" in str(failed)
    with pytest.raises(NotFoundError):
        client.catalog.entry("hf:team/tiny@main-onnx")
    scored: list[list[str]] = []

    def dropping(graphs: list[tuple[str, Path]]) -> AccuracyGate:  # the exported graph "lost" 5 points
        scored.append([g for g, _ in graphs])
        figures = tuple(
            GateFigure(g, "f1_macro", 0.9 - 0.05 * i, 5.0 * i, 1.0, i > 0) for i, (g, _) in enumerate(graphs)
        )
        return AccuracyGate(
            "gold@1", 1.0, figures, tuple(f"{f.graph}: F1 -{f.drop_points:.1f} points" for f in figures[1:])
        )

    said: list[str] = []
    forced = client.export.export(tiny_ref, "onnx", thresholds=strict, force=True, new_tokens=4, gate=dropping,
                                  gate_formats=("onnx-int8",), progress=said.append)  # fmt: skip
    # the same model files again: the first try's fp32 graph is reused, not traced a second time
    assert f"reusing the fp32 graph of export {failed.id} (the same model files and exporter)" in said
    assert "exporting the fp32 graph with a KV cache" not in said
    assert scored == [["fp32", "onnx", "onnx-int8"]]  # fp32 first, then the formats in their order
    assert "onnx: F1 -5.0 points" in forced.failures  # the exported format's drop refuses it (forced here) ...
    assert not any(f.startswith("onnx-int8") for f in forced.failures)  # ... a format only scored does not
    assert "ONNX fp32: F1 -5.0 points, latency x1.00  <- over the limit" in str(forced)
    assert forced.state == "overridden" and forced.target == "hf:team/tiny@main-onnx"
    assert client.catalog.status(forced.target).state == "cached"
    report = json.loads((client.catalog.mount(forced.target) / "export_report.json").read_text())
    assert report["state"] == "overridden" and report["failures"]  # the override is on record
    with pytest.raises(ConflictError):  # the version exists now
        client.export.export(tiny_ref, "onnx")


def test_bad_requests_and_tensorrt_on_cpu_are_refused(client: Starverse, tiny_folder) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(BadInputError):
        client.export.export(str(tiny_folder), "onnx-int3", target="team/x@1")
    with pytest.raises(BadInputError) as err:
        client.export.export(str(tiny_folder), "onnx")  # a folder needs a target
    assert "--as" in (err.value.hint or "")
    with pytest.raises(BackendUnavailableError) as refused:
        client.export.tensorrt_spec("hf:team/tiny@main", gpu=None)
    assert "NVIDIA GPU" in refused.value.message and "--gpu" in (refused.value.hint or "")


def test_a_library_warning_during_an_export_never_reaches_the_terminal() -> None:
    """transformers configures its logger when first imported; in a fresh process (a terminal's
    `starverse export`) that import happens inside the export and must not undo the quiet."""
    import subprocess
    import sys

    code = (
        "import logging\n"
        "from jupyter_starverse.export._onnx import third_party_quiet\n"
        "with third_party_quiet():\n"
        "    from transformers.utils import logging as tlog\n"
        "    tlog.get_logger('transformers.modeling_utils').warning('library chatter')\n"
        "    logging.getLogger('jupyter_starverse.export').error('ours still shows')\n"
        "tlog.get_logger('transformers.modeling_utils').warning('after the export')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "library chatter" not in done.stderr
    assert "ours still shows" in done.stderr and "after the export" in done.stderr  # levels given back
