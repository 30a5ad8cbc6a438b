"""The chat widget: pick a model, answers stream in, thumbs and a better answer land in the log."""

from __future__ import annotations

from pathlib import Path

from jupyter_starverse.client import Starverse
from jupyter_starverse.widgets.chat import ChatWidget, model_choices


def test_chat_widget_streams_and_records_votes(client: Starverse, tiny_ref: str, tiny_folder: Path) -> None:
    assert tiny_ref in model_choices(client)
    w = ChatWidget(client, feedback="team", max_new_tokens=8)
    w.load("nothing-like-a-model", wait=True)
    assert "not a model" in w.status.value and w.send_button.disabled
    w.load(tiny_ref, wait=True)
    assert not w.send_button.disabled and tiny_ref in w.status.value
    # the widget warmed a spare worker while the user picked: this load waited for the model alone
    assert w.session is not None and w.session.load_seconds["imports"] == 0.0
    try:
        first = w.send("How many cards do I need?")
        assert first is not None
        assert w.send("too early?") is None or first.turn.done.is_set()  # one question at a time
        w.wait()
        assert first.turn.text and "How many cards" not in first.text.value  # the answer, not the prompt
        assert not first.up.disabled
        first.up.click()
        second = w.send("训练一个大模型")
        assert second is not None
        w.wait()
        assert [m["role"] for m in w.messages] == ["user", "assistant", "user", "assistant"]
        second.better.value = "需要很多显卡和数据。"
        second.comment.value = "too short"
        second.down.click()
        first.down.click()  # changed my mind: replaces the thumbs up
    finally:
        w.close()
    assert w.session is None
    table = client.feedback.table("team")
    assert table.total == 3 and len(table.records) == 2
    votes = {r.prompt: (r.vote, r.better, r.comment) for r in table.records}
    assert votes["How many cards do I need?"] == ("down", None, None)
    assert votes["训练一个大模型"] == ("down", "需要很多显卡和数据。", "too short")
    assert {r.model for r in table.records} == {tiny_ref}
