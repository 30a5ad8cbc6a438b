"""Chat and vote through a served endpoint: answers from /v1/chat/completions, votes name the store version."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_starverse.cli import main
from jupyter_starverse.client import Starverse
from jupyter_starverse.errors import BackendUnavailableError, BadInputError
from jupyter_starverse.feedback import EndpointChatSession


@pytest.fixture
def served(client: Starverse, tiny_ref: str):  # type: ignore[no-untyped-def]
    # a served name other than the store ref: the record must name the store version, not what clients pass
    ep = client.serve.start(tiny_ref, name="tiny-chat")
    yield ep
    client.serve.stop(ep.id)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_chat_through_a_local_endpoint_streams_and_the_vote_names_the_served_store_version(
    client: Starverse,
    tiny_ref: str,
    served,
    tiny_folder: Path,  # type: ignore[no-untyped-def]
) -> None:
    session = client.chats.start(endpoint=served.id)
    assert isinstance(session, EndpointChatSession)
    assert session.model == tiny_ref and session.served_name == "tiny-chat"
    pieces: list[str] = []
    turn = session.ask("How many cards do I need?", max_new_tokens=6, on_piece=pieces.append).wait(60)
    assert turn.text and "".join(pieces) == turn.text and turn.tokens >= 1
    # the same words the local worker gives (greedy, same model): it is the model answering, not an echo
    with client.chats.start(str(tiny_folder)) as local:
        assert local.ask("How many cards do I need?", max_new_tokens=6).wait(120).text == turn.text
    rec = client.feedback.record("chat", model=session.model, prompt=turn.prompt, answer=turn.text, vote="up",
                                 answer_id=turn.id, session=session.id)  # fmt: skip
    [stored] = client.feedback.table("chat").records
    assert stored.id == rec.id and stored.model == tiny_ref and stored.vote == "up"
    client.chats.close(session.id)


def test_cli_chat_endpoint_by_id_and_by_url_records_the_vote(
    client: Starverse,
    tiny_ref: str,
    served,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
) -> None:
    argv = ["chat", "--endpoint", served.id, "--prompt", "hello", "--max-new-tokens", "4", "--feedback", "fb"]
    assert main([*argv, "--down", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["model"] == tiny_ref and answer["text"] and answer["feedback"] == "fb"
    monkeypatch.setenv("TINY_TOKEN", client.serve.token(served.id))
    url = served.url.removesuffix("/v1")  # the base without /v1 is taken too
    assert main(["chat", "--endpoint", url, "--token", "env:TINY_TOKEN", "--prompt", "hello", "--max-new-tokens",
                 "4", "--feedback", "fb", "--up", "--json"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["model"] == tiny_ref
    votes = sorted(r.vote or "" for r in client.feedback.table("fb").records)
    assert votes == ["down", "up"] and {r.model for r in client.feedback.table("fb").records} == {tiny_ref}


def test_an_endpoint_that_is_down_or_refuses_the_token_says_so_with_a_hint(
    client: Starverse,
    tiny_ref: str,
    served,
    capsys: pytest.CaptureFixture[str],  # type: ignore[no-untyped-def]
) -> None:
    with pytest.raises(BadInputError) as bad:  # a token by value is refused: it would land in shell history
        client.chats.start(endpoint=served.url, token="sk-" + "x" * 30)
    assert "env:" in (bad.value.hint or "")
    assert main(["chat", "--endpoint", served.url, "--prompt", "hi", "--json"]) != 0  # no token: 401
    err = capsys.readouterr().err
    assert "refused the token" in err and "--token" in err
    url = f"http://127.0.0.1:{_free_port()}/v1"
    with pytest.raises(BackendUnavailableError) as down:
        client.chats.start(endpoint=url)
    assert "does not answer" in str(down.value) and "starverse serve" in (down.value.hint or "")
    client.serve.stop(served.id)
    with pytest.raises(BackendUnavailableError) as stopped:
        client.chats.start(endpoint=served.id)
    assert "stopped" in str(stopped.value) and f"starverse serve {tiny_ref}" in (stopped.value.hint or "")
    assert main(["chat", "--prompt", "hi"]) != 0  # neither a model nor an endpoint
    assert "--endpoint" in capsys.readouterr().err


async def test_rest_chat_session_on_an_endpoint_answers_and_a_down_one_is_503(
    jp_fetch: Any,
    client: Starverse,
    tiny_ref: str,
    served,  # type: ignore[no-untyped-def]
) -> None:
    r = await jp_fetch("jupyter-starverse", "chat", "sessions", method="POST", body=json.dumps({"endpoint": served.id}))
    session = json.loads(r.body)
    assert r.code == 201 and session["model"] == tiny_ref and session["endpoint"] == served.url
    ask = {"messages": [{"role": "user", "content": "hello"}], "max_new_tokens": 4}
    path = ("jupyter-starverse", "chat", "sessions", session["id"], "turns")
    turn = json.loads((await jp_fetch(*path, method="POST", body=json.dumps(ask))).body)
    for _ in range(600):
        state = json.loads((await jp_fetch(*path, turn["id"])).body)
        if state["done"]:
            break
        await asyncio.sleep(0.05)
    assert state["done"] and state["error"] is None and state["text"]
    down = json.dumps({"endpoint": f"http://127.0.0.1:{_free_port()}/v1"})
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("jupyter-starverse", "chat", "sessions", method="POST", body=down)
    assert err.value.code == 503 and "serve" in json.loads(err.value.response.body)["hint"]
    both = json.dumps({"endpoint": served.id, "model": tiny_ref})
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("jupyter-starverse", "chat", "sessions", method="POST", body=both)
    assert err.value.code == 400


async def test_serve_ls_and_the_rest_answer_show_the_cost_so_far_at_the_cpu_rate(
    jp_fetch: Any,
    client: Starverse,
    served,
    capsys: pytest.CaptureFixture[str],  # type: ignore[no-untyped-def]
) -> None:
    rate = client.prices.price("cpu").on_demand
    [ep] = json.loads((await jp_fetch("jupyter-starverse", "serve")).body)
    assert ep["id"] == served.id and ep["cost"]["rate"] == str(rate) and ep["cost"]["running"]
    assert ep["cost"]["accelerator"] == "cpu" and ep["cost"]["unit_seconds"] >= 1
    assert main(["serve", "ls"]) == 0
    out = capsys.readouterr().out
    assert "COST" in out and client.serve.get(served.id).cost.figure.split()[-1] in out
    stopped = client.serve.stop(served.id)
    assert stopped.cost is not None and not stopped.cost.running  # the meter stops with the endpoint
    assert client.serve.get(served.id).cost.unit_seconds == stopped.cost.unit_seconds
