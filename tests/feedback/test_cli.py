"""The command line: feedback add/show/snapshot/export/ls, chat with a vote, align and export dry runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_starverse.cli import main


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_feedback_commands(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    base = ("feedback", "add", "team", "--model", "hf:team/tiny@main", "--prompt", "2+2?")
    assert _run(capsys, *base, "--answer", "5", "--down", "--better", "4")[0] == 0
    code, out, _ = _run(capsys, *base, "--answer", "4", "--up", "--json")
    assert code == 0 and json.loads(out)["vote"] == "up"
    code, out, _ = _run(capsys, "feedback", "show", "team")
    assert code == 0 and "👎" in out and "2 records" in out
    code, out, _ = _run(capsys, "feedback", "snapshot", "team")
    assert code == 0 and "team@1" in out
    target = tmp_path / "pairs.jsonl"
    code, out, _ = _run(capsys, "feedback", "export", "team@1", "--kind", "pairs", "-o", str(target))
    assert code == 0 and [json.loads(x) for x in target.read_text().splitlines()] == [
        {"prompt": "2+2?", "chosen": "4", "rejected": "5"}
    ]
    code, out, _ = _run(capsys, "feedback", "ls", "--json")
    assert json.loads(out) == [{"name": "team", "records": 2, "versions": ["team@1"]}]
    code, _, err = _run(capsys, *base, "--answer", "5", "--up", "--down")
    assert code == 2  # one vote only
    code, _, err = _run(capsys, "feedback", "show", "nobody")
    assert code == 3 and "no feedback log" in err


def test_chat_streams_and_records_the_vote(capsys: pytest.CaptureFixture[str], tiny_folder: Path) -> None:
    code, out, err = _run(capsys, "chat", str(tiny_folder), "--prompt", "How many cards?", "--max-new-tokens", "6",
                          "--feedback", "team", "--up")  # fmt: skip
    assert code == 0 and out.strip() and "feedback recorded in team" in err
    code, out, _ = _run(capsys, "feedback", "show", "team", "--json")
    assert json.loads(out)["records"][0]["vote"] == "up"
    code, _, err = _run(capsys, "chat", str(tiny_folder), "--prompt", "hi", "--up")
    assert code == 2 and "--feedback" in err


def test_tensorrt_llm_is_a_gpu_job_and_refused_on_cpu(capsys: pytest.CaptureFixture[str], tiny_ref: str) -> None:
    code, _, err = _run(capsys, "export", tiny_ref, "--format", "tensorrt-llm")
    assert code == 5 and "NVIDIA GPU" in err and "--gpu" in err
    gpu_job = ("export", tiny_ref, "--format", "tensorrt-llm", "--gpu", "h100-80g", "--dry-run")
    code, out, _ = _run(capsys, *gpu_job, "--backend", "kubernetes")
    assert code == 0 and "tensorrt_llm" in out and "nvidia.com/gpu" in out and "h100-80g" in out
    code, _, err = _run(capsys, *gpu_job, "--backend", "local")  # this machine has no GPU
    assert code == 2 and "has none" in err
    code, out, _ = _run(capsys, "align", "nobody", "--model", tiny_ref, "--dry-run")
    assert code == 3


def test_chat_without_a_prompt_is_the_widget_in_a_notebook_and_refused_in_a_terminal(
    capsys: pytest.CaptureFixture[str], ip: object, tiny_folder: Path
) -> None:
    code, _, err = _run(capsys, "chat", str(tiny_folder))
    assert code != 0 and "needs a notebook" in err and "--prompt" in err
    from jupyter_starverse.widgets.chat import ChatWidget

    widget = ip.run_line_magic("sv", f"chat {tiny_folder} --feedback team")  # type: ignore[attr-defined]
    try:
        assert isinstance(widget, ChatWidget) and widget.feedback == "team"
        widget.wait(120)
        box = widget.send("hello")
        assert box is not None
        widget.wait(120)
        assert widget.answers and widget.answers[-1].turn.done.is_set() and widget.answers[-1].turn.text
    finally:
        widget.close()
