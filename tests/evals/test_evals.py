"""Evaluation: metrics against scikit-learn, baselines on the same examples, resume, reports, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_starverse.client import Starverse
from jupyter_starverse.errors import BadInputError
from jupyter_starverse.evals import TaskOptions, classification_metrics, rouge_l, token_f1
from jupyter_starverse.evals._report import read_predictions

from .conftest import write_dataset


def test_classification_metrics_match_scikit_learn() -> None:
    sk = pytest.importorskip("sklearn.metrics")
    y = ["a", "b", "c", "a", "b", "c", "a", "a", "b"]
    p = ["a", "c", "c", "a", "b", "a", "b", "a", "d"]  # d: predicted, never expected
    m, per = classification_metrics(y, p)
    assert m["accuracy"] == pytest.approx(sk.accuracy_score(y, p))
    for avg in ("macro", "micro"):
        assert m[f"f1_{avg}"] == pytest.approx(sk.f1_score(y, p, average=avg, zero_division=0))
        assert m[f"precision_{avg}"] == pytest.approx(sk.precision_score(y, p, average=avg, zero_division=0))
        assert m[f"recall_{avg}"] == pytest.approx(sk.recall_score(y, p, average=avg, zero_division=0))
    f1s = sk.f1_score(y, p, average=None, labels=[s.label for s in per], zero_division=0)
    assert [s.f1 for s in per] == pytest.approx(list(f1s))


def test_rouge_l_matches_rouge_score_and_qa_f1() -> None:
    rs = pytest.importorskip("rouge_score.rouge_scorer")
    scorer = rs.RougeScorer(["rougeL"])
    pairs = [("the cat sat on the mat", "a cat was on the mat"), ("Checkpoints every ten steps!", "steps: ten"),
             ("nothing alike", "completely different")]  # fmt: skip
    for ref, hyp in pairs:
        assert rouge_l(ref, hyp) == pytest.approx(scorer.score(ref, hyp)["rougeL"].fmeasure)
    assert rouge_l("训练模型", "训练一个模型") > 0  # CJK characters are tokens
    assert token_f1("The Eiffel Tower", "eiffel tower!") == 1.0
    assert token_f1("two nodes", "two cards") == pytest.approx(0.5)


def test_eval_with_baseline_side_by_side_metrics_from_written_predictions(
    client: Starverse, store: dict[str, str]
) -> None:
    sk = pytest.importorskip("sklearn.metrics")
    seen = []
    run = client.evals.evaluate(store["model"], store["data"], baselines=[store["base"]], progress=seen.append,
                                options=TaskOptions(batch_size=5))  # fmt: skip
    assert [r.model for r in run.reports] == [store["model"], store["base"]]
    assert seen[-1].done == seen[-1].total == 24 and seen[-1].eta_s == 0
    for rep in run.reports:
        rows = sorted(read_predictions(Path(rep.predictions)), key=lambda r: r["idx"])
        assert [r["idx"] for r in rows] == list(range(24))  # the same examples for both
        y, p = [r["expected"] for r in rows], [r["predicted"] for r in rows]
        assert rep.metrics["f1_macro"] == pytest.approx(sk.f1_score(y, p, average="macro", zero_division=0))
        assert rep.metrics["f1_micro"] == pytest.approx(sk.f1_score(y, p, average="micro", zero_division=0))
        assert rep.dataset == "reviews@1" and rep.dataset_version == "1" and rep.model_version
        assert rep.lineage["dataset_version"] == "1"
    text = str(run)
    assert f"delta vs {store['model']}" in text and "f1_macro" in text
    a, b = (r.metrics["f1_macro"] for r in run.reports)
    assert f"{(a - b) * 100:+.1f}" in text
    # stored records: listed per model, browsable errors, the chain
    assert [r.id for r in client.evals.reports(model=store["model"])] == [run.report.id]
    wrong = run.report.wrong()
    assert wrong.total == sum(1 for r in read_predictions(Path(run.report.predictions)) if not r["correct"])
    assert "expected" in str(wrong) and "<details" in wrong._repr_html_()
    chain = client.evals.compare(store["data"], [store["base"], store["model"], "hf:team/tiny@dpo"])
    assert [r.model for r in chain.reports] == [store["base"], store["model"]]
    assert chain.missing == ("hf:team/tiny@dpo",) and " -> " in str(chain)


def test_killed_eval_resumes_where_it_stopped(client: Starverse, store: dict[str, str]) -> None:
    from jupyter_starverse.evals import _service

    calls: list[int] = []
    real = _service.load_predictor

    def counting(folder: Path, **kw: object) -> object:
        pred = real(folder, **kw)  # type: ignore[arg-type]
        calls.append(id(pred))
        counting.last = pred  # type: ignore[attr-defined]
        return pred

    class Killed(Exception):
        pass

    def kill_after_two_batches(p: object) -> None:
        if getattr(p, "done", 0) >= 8:
            raise Killed

    _service.load_predictor = counting  # type: ignore[assignment]
    try:
        with pytest.raises(Killed):
            client.evals.evaluate(store["model"], store["data"], options=TaskOptions(batch_size=4),
                                  progress=kill_after_two_batches)  # fmt: skip
        work = next((client.evals.root / ".work").glob("*.jsonl"))
        with work.open("a") as f:
            f.write('{"idx": 99, "inp')  # a torn line: the kill came mid-write
        assert len(read_predictions(work)) == 8
        run = client.evals.evaluate(store["model"], store["data"], options=TaskOptions(batch_size=4))
        assert counting.last.calls == 16 * 3  # type: ignore[attr-defined]  # 16 examples left x 3 labels
    finally:
        _service.load_predictor = real
    full = client.evals.evaluate(store["model"], store["data"], options=TaskOptions(batch_size=24))
    assert run.report.metrics == full.report.metrics
    assert sorted(r["idx"] for r in read_predictions(Path(run.report.predictions))) == list(range(24))


def test_qa_generation_perplexity(client: Starverse, store: dict[str, str], tmp_path: Path) -> None:
    rows = [{"question": f"where is the {w}?", "answer": w} for w in ("fox", "dog", "模型", "data")]
    data = write_dataset(client, tmp_path / "qa", rows, name="qa")
    qa = client.evals.evaluate(store["model"], data, task="qa", input_field="question", target_field="answer",
                               options=TaskOptions(max_new_tokens=4))  # fmt: skip
    assert set(qa.report.metrics) == {"exact_match", "token_f1"}
    gen = client.evals.evaluate(store["model"], data, task="generation", input_field="question", target_field="answer",
                                options=TaskOptions(max_new_tokens=4))  # fmt: skip
    assert "rouge_l" in gen.report.metrics
    ppl = client.evals.evaluate(store["model"], data, task="perplexity", input_field="question")
    assert ppl.report.metrics["perplexity"] > 1
    with pytest.raises(BadInputError, match="no example"):
        client.evals.evaluate(store["model"], data, input_field="nope")
    # the metrics of a report are what a fresh read of its predictions gives
    saved = json.loads((Path(qa.report.predictions).parent / "report.json").read_text())
    assert saved["metrics"] == qa.report.metrics and saved["lineage"]["model"] == store["model"]


def test_accuracy_gate_refuses_a_model_made_to_drop(
    client: Starverse, store: dict[str, str], tiny_models: tuple[Path, Path], tmp_path: Path
) -> None:
    good, dropped = tiny_models  # the labels are what `good` answers: `dropped` (other weights) loses points
    first = client.evals.evaluate(store["model"], store["data"], limit=12, options=TaskOptions(batch_size=1))
    rows = [{"input": r["input"], "target": r["predicted"]} for r in read_predictions(Path(first.report.predictions))]
    data = write_dataset(client, tmp_path / "gold", rows, name="gold")
    verdict = client.evals.gate(data, limit_points=1.0)([("fp32", good), ("onnx-int4", dropped)])
    fp32, int4 = verdict.figures
    assert fp32.value == 1.0 and int4.drop_points == pytest.approx((1.0 - int4.value) * 100) and int4.drop_points > 1
    assert verdict.failures and "limit 1 points" in verdict.failures[0] and int4.over_limit and not fp32.over_limit
    assert verdict.failures_of("onnx-int4") == verdict.failures and verdict.failures_of("onnx-int8") == ()
    head, line = verdict.lines()
    assert head.startswith(f"accuracy on {data}, 12 examples (limit 1 points): fp32 F1 100.0")
    assert line.startswith(f"INT4: F1 {-int4.drop_points:+.1f} points, latency x") and "over the limit" in line
    with pytest.raises(BadInputError):
        client.evals.gate(data, limit_points=-1)


def test_report_list_parses_a_file_once_and_again_when_it_changes(client: Starverse) -> None:
    from jupyter_starverse.evals import EvalReport

    def put(rid: str, f1: float) -> Path:
        folder = client.evals.root / rid
        folder.mkdir(parents=True, exist_ok=True)
        rep = EvalReport(rid, "hf:team/a@main", None, "d@1", "1", "classification", 3, {"f1_macro": f1})
        (folder / "report.json").write_text(json.dumps(rep.to_json()) + " " * int(f1 * 10))  # another size
        return folder / "report.json"

    put("r1", 0.5)
    put("r2", 0.7)
    reads: list[str] = []
    real = Path.read_text

    def counting(self: Path, *a: object, **kw: object) -> str:
        reads.append(self.parent.name)
        return real(self, *a, **kw)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Path, "read_text", counting)
        assert [r.metrics["f1_macro"] for r in client.evals.reports()] == [0.5, 0.7]
        assert [r.id for r in client.evals.reports(model="hf:team/a@main")] == ["r1", "r2"]
        assert sorted(reads) == ["r1", "r2"]  # the second listing parsed nothing
        put("r2", 0.9)  # rewritten (another size): read again
        (client.evals.root / "r1" / "report.json").unlink()  # removed: gone from the list
        reads.clear()
        assert [(r.id, r.metrics["f1_macro"]) for r in client.evals.reports()] == [("r2", 0.9)]
        assert reads == ["r2"]
