"""Standard tasks through lm-evaluation-harness: the YAML we render (always), and real lm-eval runs
on the tiny model over local files (skipped, saying why, where the `harness` extra is absent)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from jupyter_starverse.cli import main
from jupyter_starverse.client import Starverse
from jupyter_starverse.errors import BadInputError
from jupyter_starverse.evals import Example, TaskOptions
from jupyter_starverse.evals._harness import harness_metrics, load_task_file, render_task, write_examples
from jupyter_starverse.evals._report import read_predictions

from .conftest import LABELS

NO_HARNESS = "lm-eval is not installed: pip install 'jupyter_starverse[harness]' (kept out of the test extra)"


def test_rendered_task_is_lm_eval_yaml_over_the_examples(tmp_path: Path) -> None:
    import jinja2
    import yaml

    data = write_examples(tmp_path / "ex.jsonl", [Example(0, "fox dog", "positive"), Example(1, "数据", "neutral")])
    rows = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines()]
    assert rows[1] == {"idx": 1, "input": "数据", "target": "neutral"}
    task = render_task("reviews_cls", data, task="classification", prompt="Review: {input}\nLabel:", labels=LABELS)
    doc = yaml.safe_load(task.yaml)
    assert doc["task"] == "reviews_cls" and doc["output_type"] == "multiple_choice" == task.output_type
    assert doc["dataset_path"] == "json" and doc["dataset_kwargs"]["data_files"] == {"test": [str(data)]}
    assert doc["doc_to_choice"] == list(LABELS) and doc["target_delimiter"] == " "
    env = jinja2.Environment()  # lm-eval renders these fields with jinja2
    assert env.from_string(doc["doc_to_text"]).render(**rows[0]) == "Review: fox dog\nLabel:"
    assert env.from_string(doc["doc_to_target"]).render(**rows[0]) == str(LABELS.index("positive"))
    qa = yaml.safe_load(render_task("qa", data, task="qa", max_new_tokens=5).yaml)
    assert qa["output_type"] == "generate_until" and qa["generation_kwargs"]["max_gen_toks"] == 5
    assert qa["generation_kwargs"]["until"] == ["\n"] and qa["metric_list"][0]["metric"] == "exact_match"
    ppl = yaml.safe_load(render_task("ppl", data, task="perplexity").yaml)
    assert ppl["output_type"] == "loglikelihood_rolling"
    assert env.from_string(ppl["doc_to_target"]).render(**rows[1]) == "数据"
    for bad in ({"prompt": "no field"}, {"prompt": "{{input}}"}, {"labels": ("one",)}):
        with pytest.raises(BadInputError):
            render_task("x", data, task="classification", **{"labels": LABELS, **bad})  # type: ignore[arg-type]
    assert harness_metrics({"acc,none": 0.5, "acc_stderr,none": "N/A", "exact_match,strict-match": 1.0}) == {
        "lm_eval_acc": 0.5,
        "lm_eval_exact_match_strict-match": 1.0,
    }


def test_team_task_file_must_read_local_files(tmp_path: Path) -> None:
    hub = tmp_path / "hub.yaml"
    hub.write_text("task: boolq_copy\ndataset_path: super_glue\ndataset_name: boolq\noutput_type: multiple_choice\n")
    with pytest.raises(BadInputError, match="not on local disk; nothing is fetched"):
        load_task_file(hub)
    (tmp_path / "qa.jsonl").write_text('{"q": "a", "a": "b"}\n')
    (tmp_path / "_base.yaml").write_text(
        f"dataset_path: json\ndataset_kwargs:\n  data_files: {{test: {json.dumps(str(tmp_path / 'qa.jsonl'))}}}\n"
    )
    own = tmp_path / "own.yaml"  # an include and a !function tag, as lm-eval's own tasks have
    own.write_text("include: _base.yaml\ntask: own_qa\noutput_type: generate_until\nprocess_docs: !function u.f\n")
    task = load_task_file(own)
    assert task.name == "own_qa" and task.folder == tmp_path and task.data_files == (str(tmp_path / "qa.jsonl"),)
    for text in ("[1, 2]", "task: [a, b]\n", ": :"):  # not a task: a list, a group, broken YAML
        own.write_text(text)
        with pytest.raises(BadInputError):
            load_task_file(own)


def test_harness_classification_matches_our_runner_and_lands_in_reports(
    client: Starverse, store: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("lm_eval", reason=NO_HARNESS)
    sk = pytest.importorskip("sklearn.metrics")
    m, base, data = store["model"], store["base"], store["data"]
    before = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    seen = []
    run = client.evals.evaluate(m, data, baselines=[base], harness=True, progress=seen.append,
                                options=TaskOptions(batch_size=6))  # fmt: skip
    assert {k: os.environ.get(k) for k in before} == before  # offline only for the run
    assert seen[-1].done == seen[-1].total == 24
    assert main(["eval", "compare", "--data", data, base, m]) == 0
    assert "lm_eval_acc" in capsys.readouterr().out
    own = client.evals.evaluate(m, data).report  # our own runner on the same examples
    for rep in run.reports:
        assert rep.engine.startswith("lm-eval 0.4") and rep.dataset == "reviews@1" and rep.dataset_version == "1"
        rows = sorted(read_predictions(Path(rep.predictions)), key=lambda r: r["idx"])
        assert [r["idx"] for r in rows] == list(range(24))
        y, p = [r["expected"] for r in rows], [r["predicted"] for r in rows]
        assert rep.metrics["lm_eval_acc"] == pytest.approx(sk.accuracy_score(y, p))
        assert rep.metrics["f1_macro"] == pytest.approx(sk.f1_score(y, p, average="macro", zero_division=0))
        if rep.model == m:
            mine = sorted(read_predictions(Path(own.predictions)), key=lambda r: r["idx"])
            assert p == [r["predicted"] for r in mine]  # lm-eval's choice is our log-likelihood argmax
            assert rep.metrics["lm_eval_acc"] == pytest.approx(own.metrics["accuracy"])
        kept = Path(rep.options["harness"]["yaml"])  # the task lm-eval ran, beside the report, rerunnable
        assert kept.parent.parent == Path(rep.predictions).parent and "output_type: multiple_choice" in kept.read_text()
    assert main(["eval", "ls", "--model", m]) == 0
    assert run.report.id in capsys.readouterr().out
    assert main(["eval", "show", run.report.id]) == 0
    assert "lm_eval_acc" in capsys.readouterr().out


def test_team_lm_eval_task_file_exact_match_on_the_cli(
    client: Starverse, store: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("lm_eval", reason=NO_HARNESS)
    from jupyter_starverse.evals import load_predictor
    from jupyter_starverse.feedback import resolve_model

    # the answers: the tiny model's own greedy continuation for the even questions, another text for the odd
    pred = load_predictor(resolve_model(client.settings, client.catalog, store["model"]))
    questions = [f"what is {w}?" for w in ("fox", "data", "node", "模型", "card", "dog")]
    rows = []
    for i, q in enumerate(questions):
        said = pred.decode(pred.generate([pred.encode(f"Q: {q}\nA:")], 4)[0]).split("\n")[0]
        rows.append({"question": q, "answer": said if i % 2 == 0 else said + " not this"})
    (tmp_path / "qa.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    task = tmp_path / "team_qa.yaml"
    task.write_text(
        "task: team_qa\ndataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {json.dumps(str(tmp_path / 'qa.jsonl'))}\n"
        "test_split: test\noutput_type: generate_until\n"
        'doc_to_text: "Q: {{question}}\\nA:"\ndoc_to_target: "{{answer}}"\n'
        'generation_kwargs:\n  until: ["\\n"]\n  max_gen_toks: 4\n  do_sample: false\n'
        "metric_list:\n  - metric: exact_match\n    aggregation: mean\n    higher_is_better: true\n"
    )
    assert main(["eval", store["model"], "--harness-task", str(task), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rep = out["reports"][0]
    assert rep["task"] == "lm-eval" and rep["dataset"] == "lm-eval:team_qa" and rep["examples"] == 6
    assert rep["metrics"]["lm_eval_exact_match"] == pytest.approx(0.5)  # exactly the even ones
    wrong = client.evals.report(rep["id"]).wrong()
    assert sorted(e.idx for e in wrong.examples) == [1, 3, 5]
    assert main(["eval", store["model"], "--harness-task", str(task), "--data", store["data"]]) != 0
    assert "not both" in capsys.readouterr().err
    # as a job: the task file (absolute) and the flag travel in its parameters; only the model is mounted
    spec = client.evals.job_spec(store["model"], "", harness_task=str(task))
    params = json.loads(spec.args[0])
    assert params["harness_task"] == str(task.resolve()) and spec.mounts == (store["model"],)
    assert json.loads(client.evals.job_spec(store["model"], store["data"], harness=True).args[0])["harness"] is True


def test_a_killed_harness_run_resumes_from_lm_eval_request_cache(
    client: Starverse, store: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("lm_eval", reason=NO_HARNESS)
    from jupyter_starverse.evals import _predict

    real = _predict.TorchPredictor.scored
    asked: list[int] = []

    def dies_on_the_third_batch(self: _predict.TorchPredictor, pairs: list[tuple[list[int], list[int]]]) -> object:
        asked.append(len(pairs))
        if len(asked) == 3:
            raise KeyboardInterrupt  # a kill mid-evaluation
        return real(self, pairs)

    monkeypatch.setattr(_predict.TorchPredictor, "scored", dies_on_the_third_batch)
    opts = TaskOptions(batch_size=6)
    with pytest.raises(KeyboardInterrupt):
        client.evals.evaluate(store["model"], store["data"], harness=True, limit=8, options=opts)
    assert asked == [6, 6, 6]  # 8 examples x 3 labels = 24 requests; two batches answered
    asked.clear()
    monkeypatch.setattr(
        _predict.TorchPredictor, "scored", lambda self, pairs: asked.append(len(pairs)) or real(self, pairs)
    )
    run = client.evals.evaluate(store["model"], store["data"], harness=True, limit=8, options=opts)
    assert sum(asked) == 24 - 12 and run.report.examples == 8  # only what was left
    asked.clear()
    fresh = client.evals.evaluate(store["model"], store["data"], harness=True, limit=8, options=opts)
    assert sum(asked) == 24 and fresh.report.metrics == run.report.metrics  # a finished run's cache is gone
