"""Serve an exported ONNX (fp32) version: plain HTTP gets a completion, /v1/models names the export's lineage."""

from __future__ import annotations

import json
import urllib.request

import pytest

from jupyter_starverse.client import Starverse

pytest.importorskip("onnxruntime", reason="the ONNX engine needs onnxruntime (pip install 'jupyter-starverse[export]')")


@pytest.mark.slow
def test_an_exported_onnx_version_is_served_by_onnxruntime_and_a_chat_vote_names_it(
    client: Starverse, tiny_ref: str
) -> None:
    result = client.export.export(tiny_ref, "onnx", new_tokens=4)
    assert result.state == "ok"
    ep = client.serve.start(result.target)
    try:
        assert ep.engine == "onnxruntime" and ep.lineage.export and ep.lineage.export["format"] == "onnx"
        headers = {"Authorization": f"Bearer {client.serve.token(ep.id)}", "Content-Type": "application/json"}
        body = json.dumps({"model": result.target, "prompt": "The quick brown fox", "max_tokens": 4}).encode()
        req = urllib.request.Request(f"{ep.url}/completions", data=body, headers=headers)
        with urllib.request.urlopen(req, timeout=60) as r:
            answer = json.loads(r.read())
        assert answer["choices"][0]["text"] and answer["usage"]["completion_tokens"] >= 1
        with urllib.request.urlopen(urllib.request.Request(f"{ep.url}/models", headers=headers), timeout=30) as r:
            card = json.loads(r.read())["data"][0]
        assert card["starverse"]["engine"] == "onnxruntime"
        assert card["starverse"]["lineage"]["export"]["source"] == tiny_ref
        session = client.chats.start(endpoint=ep.id)  # product people rate the deployed (exported) model
        assert session.model == result.target
        assert session.ask("hello", max_new_tokens=3).wait(60).text
    finally:
        client.serve.stop(ep.id)
