"""Chat with a tiny model pulled through the store, in a worker process, with feedback from two writers."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import pytest

from jupyter_starverse._settings import Settings
from jupyter_starverse.client import Starverse
from jupyter_starverse.errors import BadInputError, NotFoundError
from jupyter_starverse.feedback import ChatSession


def test_chat_streams_and_two_concurrent_writers_label_it(client: Starverse, tiny_ref: str) -> None:
    session = client.chats.start(tiny_ref)
    try:
        assert session.alive and session.model == tiny_ref
        seen: list[str] = []
        turn = session.ask("How many cards do I need?", max_new_tokens=12, on_piece=seen.append)
        streamed = list(turn.stream())
        turn.wait(60)
        assert 0 < turn.tokens <= 12  # greedy stops at 12 tokens or at </s>
        assert streamed == turn.pieces == seen and "".join(streamed) == turn.text
        assert turn.text.strip(), "the model answered nothing"
        again = session.ask("How many cards do I need?", max_new_tokens=12).wait(60)
        assert again.text == turn.text  # greedy: the same prompt gives the same answer
        other = session.ask([{"role": "user", "content": "训练一个大模型"}], max_new_tokens=8).wait(60)

        def label(who: str, vote: str) -> None:
            for t in (turn, other):
                client.feedback.record(
                    "chat",
                    model=session.model,
                    prompt=t.prompt,
                    answer=t.text,
                    vote=vote,
                    answer_id=t.id,
                    session=session.id,
                    user=who,
                )

        writers = [threading.Thread(target=label, args=(w, v)) for w, v in (("ana", "up"), ("bo", "up"))]
        for w in writers:
            w.start()
        for w in writers:
            w.join()
        client.feedback.record(
            "chat",
            model=session.model,
            prompt=other.prompt,
            answer=other.text,
            vote="down",
            better="需要很多显卡和数据。",
            answer_id=other.id,
            user="chen",
        )
        with pytest.raises(BadInputError):
            session.ask([{"role": "assistant", "content": "hi"}])  # the last message must be the user's
        with pytest.raises(BadInputError):
            session.ask("")
    finally:
        session.close()
    assert not session.alive
    table = client.feedback.table("chat")
    assert table.total == 5 and {r.model for r in table.records} == {tiny_ref}
    pairs = client.feedback.pairs("chat")
    assert [(p.prompt, p.chosen) for p in pairs] == [("训练一个大模型", "需要很多显卡和数据。")]


def test_chat_refuses_bad_models(client: Starverse) -> None:
    with pytest.raises(BadInputError):
        client.chats.start("/no/such/folder")
    with pytest.raises(NotFoundError):
        client.chats.start("exp:nothing-here")
    with pytest.raises(NotFoundError):
        client.chats.get("nope")


def test_an_idle_worker_gives_its_memory_back_and_the_next_question_starts_it_again(
    tiny_folder: Path, tmp_path: Path
) -> None:
    from jupyter_starverse.feedback import ChatSession

    session = ChatSession("tiny", tiny_folder, log_dir=tmp_path, idle_seconds=1.0)
    try:
        first = session.ask("How many cards do I need?", max_new_tokens=6).wait(60)
        assert first.error is None and first.text
        pid = session._proc.pid
        session._proc.wait(60)  # no question for a second: the worker exits by itself
        assert session.asleep and session.alive  # the process is gone, the session still answers
        assert session.to_json()["asleep"] is True
        again = session.ask("How many cards do I need?", max_new_tokens=6).wait(60)
        assert again.error is None and again.text == first.text  # same model, greedy: same answer
        assert session._proc.pid != pid and session.restarts == 1 and not session.asleep
    finally:
        session.close()
    assert not session.alive


def test_a_spare_worker_takes_the_next_chat_and_answers_as_a_fresh_one(client: Starverse, tiny_folder: Path) -> None:
    """The panel's chat section warms a spare (torch and transformers imported, no model): the next
    chat loads only the model in it, and answers exactly as a chat in a new worker does."""
    assert client.chats.prewarm() is True
    assert client.chats.prewarm() is False  # one spare at a time: a second call starts nothing
    spare = client.chats._spare
    assert spare is not None
    warm = client.chats.start(str(tiny_folder))
    cold = client.chats.start(str(tiny_folder))
    try:
        assert isinstance(warm, ChatSession) and isinstance(cold, ChatSession)
        assert warm._proc is spare.proc and client.chats._spare is None  # the spare was taken, not kept
        assert warm.load_seconds["imports"] == 0.0 and cold.load_seconds["imports"] > 0
        assert {"tokenizer", "model", "ready"} <= warm.load_seconds.keys()
        a = warm.ask("How many cards do I need?", max_new_tokens=8).wait(60)
        b = cold.ask("How many cards do I need?", max_new_tokens=8).wait(60)
        assert a.text and a.text == b.text  # same model, greedy: the spare changes nothing but the wait
    finally:
        client.chats.close()
    # closing a chat ends its worker by itself (stdin closed: it exits at once), never by a signal
    assert warm._proc.returncode == 0 and cold._proc.returncode == 0


def test_a_spare_that_nobody_takes_exits_by_itself(settings: Settings) -> None:
    from jupyter_starverse.feedback import ChatSessions

    settings = dataclasses.replace(settings, chat_idle_minutes=1 / 60)  # a second
    chats = ChatSessions(settings, Starverse(settings).catalog)
    assert chats.prewarm() is True
    spare = chats._spare
    assert spare is not None
    assert spare.proc.wait(60) == 0  # nobody took it within the idle time: it went, its memory with it
    assert chats._take_spare() is None  # the next chat starts a worker of its own
    assert chats.prewarm() is True  # and the panel's next look at the models warms a new one
    chats.close()
    assert not spare.alive and chats._spare is None
