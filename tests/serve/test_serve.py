"""Serve the tiny Llama from the store: a real OpenAI client, streaming, auth, bad requests, stop."""

from __future__ import annotations

import json
import socket
import stat
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from jupyter_starverse.cli import main
from jupyter_starverse.client import Starverse
from jupyter_starverse.errors import BadInputError, NotFoundError


def _post(url: str, body: Any, token: str | None, *, raw: bytes | None = None) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = raw if raw is not None else json.dumps(body).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _port_free(port: int) -> bool:
    """Nothing listens on the port and a new server can take it (as servers do: SO_REUSEADDR, past TIME_WAIT)."""
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", port)) == 0:
            return False
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen()
        except OSError:
            return False
    return True


def test_an_openai_client_gets_a_completion_and_a_stream_and_stop_frees_the_port(
    client: Starverse, tiny_ref: str
) -> None:
    openai = pytest.importorskip("openai")
    ep = client.serve.start(tiny_ref)
    try:
        assert ep.state == "running" and ep.engine == "transformers" and ep.url
        token_file = Path(ep.token_file)
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        api = openai.OpenAI(base_url=ep.url, api_key=client.serve.token(ep.id), max_retries=0)
        # the chat goes through the model's chat template; usage counts what was generated
        chat = api.chat.completions.create(
            model=tiny_ref, messages=[{"role": "user", "content": "How many cards do I need?"}], max_tokens=6
        )
        assert chat.choices[0].message.role == "assistant" and chat.usage.completion_tokens <= 6
        assert chat.choices[0].finish_reason in ("stop", "length")
        pieces = [c.choices[0].text for c in api.completions.create(
            model=tiny_ref, prompt="The quick brown fox", max_tokens=6, stream=True)]  # fmt: skip
        whole = api.completions.create(model=tiny_ref, prompt="The quick brown fox", max_tokens=6)
        assert "".join(pieces) == whole.choices[0].text  # greedy: the stream is the same answer, piece by piece
        streamed = list(api.chat.completions.create(
            model=tiny_ref, messages=[{"role": "user", "content": "hi"}], max_tokens=4, stream=True))  # fmt: skip
        assert streamed[0].choices[0].delta.role == "assistant" and streamed[-1].choices[0].finish_reason
        # /v1/models names the store version and its commit (lineage)
        (card,) = api.models.list().data
        assert card.id == tiny_ref
        lineage = card.model_extra["starverse"]["lineage"]
        assert lineage["model"] == tiny_ref and lineage["commit"] == client.catalog.status(tiny_ref).commit
        assert [e.id for e in client.serve.ls()] == [ep.id]
    finally:
        stopped = client.serve.stop(ep.id)
    assert stopped.state == "stopped" and ep.port is not None and _port_free(ep.port)
    assert client.serve.ls().rows == () and client.serve.ls(all=True).rows[0].state == "stopped"


def test_bad_requests_get_4xx_with_a_message_and_the_token_is_required(client: Starverse, tiny_ref: str) -> None:
    ep = client.serve.start(tiny_ref, max_tokens=64)
    try:
        token = client.serve.token(ep.id)
        chat = f"{ep.url}/chat/completions"
        ok = {"model": tiny_ref, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        assert _post(chat, ok, token)[0] == 200
        for body, token_used, status, param in (
            (ok, None, 401, None),  # no token
            (ok, "wrong-token-wrong-token", 401, None),
            ({**ok, "model": "hf:other/model@main"}, token, 404, "model"),
            ({**ok, "max_tokens": 0}, token, 400, "max_tokens"),
            ({**ok, "max_tokens": 65}, token, 400, "max_tokens"),  # over what the endpoint serves
            ({**ok, "max_tokens": "many"}, token, 400, "max_tokens"),
            ({"model": tiny_ref}, token, 400, "messages"),
            ({**ok, "messages": [{"role": "robot", "content": "x"}]}, token, 400, "messages"),
            ({**ok, "temperature": 9}, token, 400, "temperature"),
        ):
            code, answer = _post(chat, body, token_used)
            assert code == status, (body, answer)
            assert answer["error"]["message"] and answer["error"]["param"] == param
        code, answer = _post(chat, None, token, raw=b"{not json")
        assert code == 400 and "not JSON" in answer["error"]["message"]
        code, answer = _post(f"{ep.url}/completions", {"model": tiny_ref, "prompt": 3}, token)
        assert code == 400 and answer["error"]["param"] == "prompt"
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"{ep.url}/models", timeout=10)
        assert e.value.code == 401
        with urllib.request.urlopen(f"http://127.0.0.1:{ep.port}/health", timeout=10) as r:  # probes need no token
            assert json.loads(r.read())["status"] == "ok"
    finally:
        client.serve.stop(ep.id)


def test_start_refuses_bad_input_before_starting_anything(client: Starverse, tiny_folder: Path) -> None:
    with pytest.raises(BadInputError, match="engine"):
        client.serve.start(str(tiny_folder), engine="tensorrt")
    with pytest.raises(BadInputError, match="port"):
        client.serve.start(str(tiny_folder), port=70000)
    with pytest.raises(BadInputError, match=r"model\.onnx"):
        client.serve.start(str(tiny_folder), engine="onnxruntime")
    with pytest.raises(BadInputError, match="not a model"):
        client.serve.start("/nonexistent/folder")
    with pytest.raises(NotFoundError):
        client.serve.stop("no-such-endpoint")
    with pytest.raises(BadInputError):
        client.serve.stop("../../etc")
    assert client.serve.ls(all=True).rows == ()


def test_cli_serve_ls_and_stop(client: Starverse, tiny_ref: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", tiny_ref, "--json"]) == 0
    ep = json.loads(capsys.readouterr().out)
    try:
        assert ep["state"] == "running" and ep["url"].startswith("http://127.0.0.1:")
        assert main(["serve", "ls"]) == 0
        out = capsys.readouterr().out
        assert ep["id"] in out and "running" in out
    finally:
        assert main(["serve", "stop", ep["id"], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "stopped"
    assert main(["serve", "stop"]) != 0  # an error with a hint, not a traceback
    capsys.readouterr()
    assert main(["serve", "stop", "nobody"]) == 3 and "no serve" in capsys.readouterr().err
