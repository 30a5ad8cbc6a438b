"""The chat panel's REST: a session streams an answer by polling, two writers vote at once, export runs."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

NS = "jupyter-starverse"


async def _call(jp_fetch: Any, *path: str, method: str = "GET", body: Any = None, **params: Any) -> tuple[int, Any]:
    kwargs: dict[str, Any] = {"method": method}
    if body is not None:
        kwargs["body"] = json.dumps(body)
    if params:
        kwargs["params"] = params
    r = await jp_fetch(NS, *path, **kwargs)
    return r.code, json.loads(r.body) if r.body else None


async def _error(jp_fetch: Any, *path: str, **kw: Any) -> tuple[int, dict[str, Any]]:
    with pytest.raises(HTTPClientError) as err:
        await _call(jp_fetch, *path, **kw)
    return err.value.code, json.loads(err.value.response.body)


async def test_chat_streams_by_polling_and_two_writers_vote(jp_fetch: Any, tiny_ref: str) -> None:
    code, models = await _call(jp_fetch, "chat", "models")
    assert tiny_ref in models
    code, session = await _call(jp_fetch, "chat", "sessions", method="POST", body={"model": tiny_ref})
    assert code == 201 and session["model"] == tiny_ref and session["alive"]
    # listing the models warmed a spare worker: this chat waited for the model's load, not torch's import
    assert session["load_seconds"]["imports"] == 0.0 and session["load_seconds"]["model"] > 0
    sid = session["id"]
    ask = {"messages": [{"role": "user", "content": "How many cards do I need?"}], "max_new_tokens": 10}
    code, turn = await _call(jp_fetch, "chat", "sessions", sid, "turns", method="POST", body=ask)
    assert code == 202
    pieces: list[str] = []
    after = 0
    for _ in range(600):
        _, state = await _call(jp_fetch, "chat", "sessions", sid, "turns", turn["id"], after=after)
        pieces += state["pieces"]
        after = state["next"]
        if state["done"]:
            break
        await asyncio.sleep(0.05)
    assert state["done"] and state["error"] is None
    assert "".join(pieces) == state["text"] and state["text"]
    record = {"log": "chat", "model": tiny_ref, "prompt": state["prompt"], "answer": state["text"],
              "answer_id": turn["id"], "session": sid}  # fmt: skip
    results = await asyncio.gather(
        _call(jp_fetch, "feedback", "records", method="POST", body={**record, "vote": "up"}),
        # the second writer judges a regenerated answer: one user's two votes on one answer would
        # be a change of mind, of which only the newest counts
        _call(jp_fetch, "feedback", "records", method="POST",
              body={**record, "answer": "Four cards.", "answer_id": f"{turn['id']}-regen",
                    "vote": "down", "better": "two nodes"}),
    )  # fmt: skip
    assert [c for c, _ in results] == [201, 201]
    _, table = await _call(jp_fetch, "feedback", "table", ref="chat")
    # "two nodes" beats "Four cards.", and the up-voted answer beats the down-voted one
    assert table["total"] == 2 and table["pairs"] == 2
    code, snap = await _call(jp_fetch, "feedback", "snapshot", method="POST", body={"log": "chat"})
    assert code == 201 and snap["ref"] == "chat@1"
    _, logs = await _call(jp_fetch, "feedback")
    assert logs == [{"name": "chat", "records": 2, "versions": ["chat@1"]}]
    code, _ = await _call(jp_fetch, "chat", "sessions", sid, method="DELETE")
    assert code == 204
    code, err = await _error(jp_fetch, "chat", "sessions", sid, "turns", turn["id"])
    assert code == 404 and err["hint"]


async def test_bad_requests_are_4xx_with_hints(jp_fetch: Any) -> None:
    bad = {"log": "chat", "model": "m", "prompt": "p", "answer": "a", "vote": "maybe"}
    code, err = await _error(jp_fetch, "feedback", "records", method="POST", body=bad)
    assert code == 400 and err["field"] == "vote"
    code, err = await _error(jp_fetch, "feedback", "table", ref="nobody")
    assert code == 404
    code, err = await _error(jp_fetch, "chat", "sessions", method="POST", body={"model": "/no/such/model"})
    assert code == 400 and err["field"] == "model"
    code, err = await _error(jp_fetch, "export", method="POST", body={"model": "hf:a/b", "format": "onnx-int3"})
    assert code == 400 and err["field"] == "format"
    code, err = await _error(jp_fetch, "export", method="POST", body={"model": "hf:a/b", "format": "tensorrt-llm"})
    assert code == 503 and "NVIDIA GPU" in err["message"]


@pytest.mark.slow
async def test_export_from_the_panel_reports_and_stores(jp_fetch: Any, tiny_ref: str) -> None:
    code, task = await _call(jp_fetch, "export", method="POST", body={"model": tiny_ref, "format": "onnx"})
    assert code == 202 and task["state"] == "running"
    for _ in range(1200):
        _, task = await _call(jp_fetch, "export", task["id"])
        if task["state"] != "running":
            break
        await asyncio.sleep(0.1)
    assert task["state"] == "ok", task["error"]
    fig = task["result"]["figures"][0]
    assert fig["max_abs_logit_diff"] <= 1e-4 and fig["greedy_agreement"] == 1.0
    assert task["result"]["target"] == "hf:team/tiny@main-onnx"
    code, err = await _error(jp_fetch, "export", method="POST", body={"model": tiny_ref, "format": "onnx"})
    assert code == 409 and "already in the store" in err["message"]  # that version exists now
