"""Every ``%sv`` command, run in a plain IPython shell, shows text and HTML a person can read.

Nothing shown may be a dataclass repr (``Entry(kind=...``), an ``object at 0x...`` or a
``<generator ...>``. The table below must name every command of the parser tree, so a new
command gets checked too.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

from jupyter_starverse._settings import Settings
from jupyter_starverse.cli import build_parser

from ..widgets._jobs import quick_job

BAD = re.compile(r"object at 0x|<generator|\b[A-Z][A-Za-z]+\([a-z_]+=")


def _leaves(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    out: set[tuple[str, ...]] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                out |= _leaves(child, (*prefix, name)) or {(*prefix, name)}
    return out


def _shown(ip: Any, line: str, cell: str | None = None) -> list[str]:
    """Everything a person would see for ``%sv line``: printed text, text/plain, text/html."""
    with capture_output() as cap:
        result = ip.run_cell_magic("sv", line, cell) if cell is not None else ip.run_line_magic("sv", line)
        data, _ = ip.display_formatter.format(result)
        html_of = getattr(type(result), "_repr_html_", None)  # the test shell's HTML formatter is off
        html = html_of(result) if html_of is not None else ""
    texts = [cap.stdout, *(str(v) for v in data.values()), str(html or "")]
    for out in cap.outputs:
        texts += [str(v) for v in out.data.values()]
    return texts


@pytest.fixture
def world(settings: Settings, tmp_path: Path) -> dict[str, str]:
    """A finished local job, a dataset folder and a model folder."""
    handle = quick_job(settings, name="Quick Run.v1")
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("hello\n" * 100)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    (model / "model.safetensors").write_bytes(b"\0" * 1000)
    script = tmp_path / "My Train_v2.py"
    script.write_text("print('hi')\n")
    pipeline = tmp_path / "flow.svpipeline"
    node = {"id": "train", "kind": "train", "params": {"script": script.name}, "position": {"x": 0, "y": 0}}
    pipeline.write_text(json.dumps({"version": 1, "name": "flow", "backend": "local", "nodes": [node], "edges": []}))
    return {
        "job": handle.id,
        "data": str(data),
        "model": str(model),
        "script": str(script),
        "pipeline": str(pipeline),
        "out": str(tmp_path / "pairs.jsonl"),
    }


def test_every_sv_command_shows_readable_text_and_html(ip: Any, world: dict[str, str]) -> None:
    job, data, model, script = world["job"], world["data"], world["model"], world["script"]
    pipeline, out = world["pipeline"], world["out"]
    cell = "print('step 0 loss 1.0')\n"
    commands: list[tuple[tuple[str, ...], str, str | None]] = [
        (("info",), "info", None),
        (("cost",), "cost", None),
        (("cost", "estimate"), "cost estimate --gpu rtx4090 --cards 2 --hours 1", None),
        (("cost", "estimate"), "cost estimate --gpu rtx4090 --cards 2 --hours 1 --compare", None),
        (("cost", "estimate"), "cost estimate --mixed rtx4090:256,a100-80g:128 --duration 12d", None),
        (("cost", "prices"), "cost prices", None),
        (("cost", "total"), "cost total", None),
        (("cost", "job"), f"cost job {job}", None),
        (("train",), "train --dry-run --steps 2", cell),
        (("store", "ls"), "store ls", None),
        (("store", "add"), f"store add corpus {data}", None),
        (("store", "pull"), "store pull corpus", None),
        (("store", "status"), "store status corpus", None),
        (("store", "verify"), "store verify corpus", None),
        (("store", "mount"), "store mount corpus", None),
        (("mount",), "mount corpus", None),
        (("store", "import-model"), f"store import-model {model} --as local/tiny", None),
        (("store", "ls"), "store ls", None),
        (("data", "estimate"), "data estimate dedup corpus", None),
        (("data", "scan"), "data scan corpus", None),
        (("data", "clean"), "data clean corpus", None),
        (("data", "dedup"), "data dedup corpus", None),
        (("data", "score"), "data score corpus", None),
        (("data", "reports"), "data reports", None),
        (("data", "report"), "data report no-such-report", None),
        (("recipes", "ls"), "recipes ls", None),
        (("recipes", "show"), "recipes show cpt", None),
        (("recipes", "lineage"), "recipes lineage hf:local/tiny@main", None),
        (("recipes", "pretokenize"), "recipes pretokenize corpus --model hf:local/tiny --name toks", None),
        (("recipes", "publish"), f"recipes publish {job} --repo acme/out@v1", None),
        (("feedback", "add"), "feedback add team --model hf:local/tiny --prompt hi --answer hello --up", None),
        (("feedback", "ls"), "feedback ls", None),
        (("feedback", "show"), "feedback show team", None),
        (("feedback", "snapshot"), "feedback snapshot team", None),
        (("feedback", "export"), f"feedback export team@1 --kind records -o {out}", None),
        (("chat",), "chat hf:local/tiny --prompt hi", None),
        (("align",), "align team@1 --model hf:local/tiny --dry-run", None),
        (("export",), "export hf:local/tiny --format onnx", None),
        (("eval",), "eval hf:local/tiny --data corpus", None),
        (("eval",), "eval compare --data corpus hf:local/tiny", None),
        (("eval",), "eval ls", None),
        (("eval",), "eval hf:local/tiny --data corpus --harness --limit 2", None),
        (("eval",), "eval hf:local/tiny --harness-task no-such-task.yaml", None),
        (("store", "show"), "store show hf:local/tiny", None),
        (("pipeline", "validate"), f"pipeline validate {pipeline}", None),
        (("pipeline", "cost"), f"pipeline cost {pipeline}", None),
        (("pipeline", "export"), f"pipeline export {pipeline}", None),
        (("pipeline", "runs"), "pipeline runs", None),
        (("pipeline", "status"), "pipeline status no-such-run", None),
        (("pipeline", "cancel"), "pipeline cancel no-such-run", None),
        (("pipeline", "drive"), "pipeline drive no-such-run", None),
        (("pipeline", "run"), f"pipeline run {pipeline}.missing", None),
        (("store", "evict"), "store evict --max-bytes 1G", None),
        (("store", "rm"), "store rm corpus", None),
        (("launch",), f"launch '{script}' --dry-run", None),
        (("launch",), f"launch '{script}' --dry-run -o json", None),
        (("jobs",), "jobs", None),
        (("jobs", "ls"), "jobs ls", None),
        (("jobs", "show"), f"jobs show {job}", None),
        (("jobs", "logs"), f"jobs logs {job}", None),
        (("jobs", "logs"), f"jobs logs {job} --json", None),
        (("jobs", "wait"), f"jobs wait {job}", None),
        (("jobs", "cancel"), f"jobs cancel {job}", None),
        (("jobs", "preempt"), f"jobs preempt {job}", None),
        (("mode",), "mode", None),
        (("mode",), "mode cpu --dry-run", None),
        (("mode",), "mode gpu --dry-run", None),
        (("mode",), "mode --widget", None),
        (("mode",), "mode gpu", None),
        (("mode",), "mode restore", None),
        (("mode",), "mode cpu", None),
        (("mode",), "mode restore", None),
        (("env", "build"), "env build notebook", None),
        (("env", "ls"), "env ls", None),
        (("env", "show"), "env show no-such-env", None),
        (("env", "rm"), "env rm no-such-env", None),
        (("env", "image"), f"env image team/torch:2.13 {out}.missing", None),
        (("serve",), "serve ls", None),
        (("serve",), "serve stop no-such-endpoint", None),
        (("demo",), "demo --nodes 1 --procs 1 --steps 2", None),
        (("info",), "--help", None),
    ]
    assert {c[0] for c in commands} >= _leaves(build_parser()), "add the new command to this table"
    ip.user_ns["kept"] = 42
    seen: dict[str, list[str]] = {}
    for _, line, body in commands:
        try:
            seen[line] = _shown(ip, line, body)
        except UsageError as e:  # a refusal is one line of text, also readable
            seen[line] = [str(e)]
    bad = {line: [t for t in texts if BAD.search(t)] for line, texts in seen.items()}
    bad = {line: [t[:300] for t in texts] for line, texts in bad.items() if texts}
    assert not bad, bad
    html = " ".join(seen["jobs ls"])
    assert "Quick Run.v1" in html and "starverse-state" in html
    assert any("<span style=" in t for t in seen[f"launch '{script}' --dry-run"])  # highlighted YAML
    assert any("[0] step 4 loss 0.400" in t for t in seen[f"jobs logs {job}"])
    assert ip.user_ns["kept"] == 42
