"""The same steps through the CLI (and so %sv), REST and the report widget."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_starverse.cli import main as cli_main
from jupyter_starverse.client import Starverse
from tests.data.corpus import dup_corpus


def _raw(tmp_path: Path, texts: list[str]) -> Path:
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "a.jsonl").write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts))
    return folder


def test_cli_runs_steps_prints_the_estimate_first_and_lists_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = _raw(tmp_path, dup_corpus(40, seed=3, dup_share=0.25).docs)
    assert cli_main(["store", "add", "corpus", str(src)]) == 0
    capsys.readouterr()
    assert cli_main(["data", "dedup", "corpus", "--threshold", "0.7"]) == 0
    out, err = capsys.readouterr()
    assert err.splitlines()[0].startswith("estimate for dedup of corpus@1")
    assert "... dedup pass 1/2 [" in err and "... dedup pass 2/2 [" in err and "ETA" in err  # the bar, per tenth
    assert "dedup corpus@1 -> corpus@1-dedup" in out and "near" in out
    assert Starverse().catalog.entry("corpus@1-dedup").derived_from == "corpus@1"
    assert Starverse().catalog.entry("corpus").ref == "corpus@1"  # a step's output is used only when named
    assert cli_main(["data", "reports", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed[0]["output"] == "corpus@1-dedup"
    page = tmp_path / "report.html"
    assert cli_main(["data", "report", listed[0]["id"], "--html", str(page)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {page}"
    assert "Duplicate clusters" in page.read_text() and "sv-slider" in page.read_text()
    assert cli_main(["data", "estimate", "scan", "corpus@1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["step"] == "scan"
    assert cli_main(["data", "clean", "corpus@1", "--action", "person"]) == 2
    assert "TYPE=ACTION" in capsys.readouterr().err


async def test_rest_runs_a_step_and_serves_reports_and_previews(jp_fetch: Any, tmp_path: Path) -> None:
    src = _raw(tmp_path, dup_corpus(40, seed=6, dup_share=0.25).docs)
    Starverse().catalog.add_dataset("corpus", str(src))
    body = {"step": "dedup", "source": "corpus", "options": {"threshold": 0.7}}
    r = await jp_fetch("jupyter-starverse", "data", "steps", method="POST", body=json.dumps(body))
    assert r.code == 202  # started, not finished: the panel polls it
    run = json.loads(r.body)
    assert run["state"] == "running" and run["report_id"] is None
    assert r.headers["Location"].endswith(f"/data/steps/{run['id']}")
    run = await _until_finished(jp_fetch, run["id"])
    assert run["state"] == "succeeded", run["error"]
    assert run["output"] == "corpus@1-dedup"
    progress = run["progress"]  # dedup reads the corpus twice; the last pass read every document
    assert progress["phase"] == "done" and progress["fraction"] == 1.0
    assert (progress["pass_no"], progress["passes"]) == (2, 2)
    report = json.loads((await jp_fetch("jupyter-starverse", "data", "report", params={"id": run["report_id"]})).body)
    assert progress["docs_done"] == progress["docs_total"] == report["docs_in"] == 50 and progress["total_exact"]
    assert 0 < progress["bytes_total"] and progress["bytes_done"] > 0
    assert report["output"] == "corpus@1-dedup" and report["removed"]["near"] > 0
    listed = json.loads((await jp_fetch("jupyter-starverse", "data", "reports")).body)
    assert [x["id"] for x in listed] == [report["id"]]
    r = await jp_fetch("jupyter-starverse", "data", "preview", params={"id": report["id"], "threshold": "0.5"})
    assert json.loads(r.body)["removed"] >= report["removed"]["near"]
    r = await jp_fetch("jupyter-starverse", "data", "report", "html", params={"id": report["id"]})
    assert "<h3>Duplicate clusters</h3>" in json.loads(r.body)["html"]
    for bad in ({"step": "shred", "source": "corpus"}, {"step": "dedup", "source": "corpus", "options": {"nope": 1}}):
        with pytest.raises(HTTPClientError) as info:
            await jp_fetch("jupyter-starverse", "data", "steps", method="POST", body=json.dumps(bad))
        assert info.value.code == 400
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch("jupyter-starverse", "data", "report", params={"id": "no-such-report"})
    assert info.value.code == 404
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch("jupyter-starverse", "data", "steps", "no-such-run")
    assert info.value.code == 404


async def _until_finished(jp_fetch: Any, run_id: str, timeout: float = 120.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        run: dict[str, Any] = json.loads((await jp_fetch("jupyter-starverse", "data", "steps", run_id)).body)
        if run["state"] != "running" or time.monotonic() > deadline:
            return run
        assert run["progress"]["phase"] in ("starting", "estimating", "reading", "publishing", "done")
        await asyncio.sleep(0.1)


async def test_rest_step_errors_are_text_with_a_hint_and_a_cut_short_run_reads_interrupted(
    jp_fetch: Any, tmp_path: Path
) -> None:
    body = {"step": "scan", "source": "no-such-dataset"}
    r = await jp_fetch("jupyter-starverse", "data", "steps", method="POST", body=json.dumps(body))
    assert r.code == 202  # the source is looked up in the background
    run = await _until_finished(jp_fetch, json.loads(r.body)["id"])
    assert run["state"] == "failed" and run["report_id"] is None
    assert "no-such-dataset" in run["error"]["message"] and run["error"]["hint"]
    # a run whose server went away (its state file still says running) is not left "running" forever
    folder = Starverse().data.prepared / "_steps"
    gone = dict(run, id="20260101-000000-dedup-abcdef", state="running", error=None, finished_at=None)
    (folder / f"{gone['id']}.json").write_text(json.dumps(gone))
    again = json.loads((await jp_fetch("jupyter-starverse", "data", "steps", gone["id"])).body)
    assert again["state"] == "interrupted" and again["error"]["hint"] == "start the step again"


def test_report_widget_sliders_preview_other_thresholds(client: Starverse, tmp_path: Path) -> None:
    from jupyter_starverse.widgets.data import ReportView

    src = _raw(tmp_path, dup_corpus(60, seed=8, dup_share=0.3).docs)
    client.catalog.add_dataset("corpus", str(src))
    view = ReportView(client.data.dedup("corpus"))
    assert view.dedup_slider is not None
    at_default = view.dedup_label.value
    view.dedup_slider.value = 0.99
    assert view.dedup_label.value != at_default  # fewer pairs are that similar
    view.dedup_slider.value = 0.5
    assert f"<b>{view.report.removed_at(0.5)}</b>" in view.dedup_label.value
    scored = ReportView(client.data.score("corpus@1-dedup", min_quality=0.5))
    scored.score_sliders["quality"].value = 1.0
    assert f"<b>{sum(scored.report.histograms[0].counts)}</b>" in scored.score_labels["quality"].value
