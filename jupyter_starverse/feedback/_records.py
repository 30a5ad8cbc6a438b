"""Feedback records: one judgement of one answer, and the append-only log they live in.

A log is a folder on the store, ``<store>/feedback/<name>/records/``, holding one small JSON
file per record, named ``<time_ns>-<uuid>.json`` and written to a temp name then renamed.
Writers never touch a file another process writes, so any number of processes on any number
of hosts append at once without a lock (rename(2) is atomic on NFS as on a local disk) and a
reader never sees half a record. Records are never changed: a user who changes their mind
writes a new record for the same ``answer_id``, and readers keep the newest one per
``(user, answer_id)`` (:func:`effective`).
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from jupyter_starverse._inputs import encodable
from jupyter_starverse.errors import BadInputError, StoreError

__all__ = ["MAX_TEXT", "VOTES", "FeedbackLog", "FeedbackRecord", "effective", "new_record"]

VOTES = ("up", "down")
#: Longest prompt, answer, better answer or comment we accept (characters).
MAX_TEXT = 64_000
log = logging.getLogger(__name__)


def _text(value: object, name: str, *, required: bool) -> str | None:
    if value is None or (isinstance(value, str) and not value.strip() and not required):
        if required:
            raise BadInputError(f"{name} is required", field=name, hint=f"give the {name} as text")
        return None
    if not isinstance(value, str) or not value.strip():
        raise BadInputError(f"{name} must be non-empty text", field=name, hint=f"give the {name} as text")
    if len(value) > MAX_TEXT:
        raise BadInputError(
            f"{name} is {len(value)} characters long; at most {MAX_TEXT} are kept",
            field=name,
            hint="shorten it",
        )
    if not encodable(value):  # json.loads lets "\ud800" through; the log's UTF-8 file would not
        raise BadInputError(f"{name} is not valid UTF-8 (a lone surrogate)", field=name,
                            hint="send text without unpaired surrogates such as \\ud800")  # fmt: skip
    return value


@dataclass(frozen=True)
class FeedbackRecord:
    """Who judged which model's answer to which prompt, when, and how.

    ``vote`` is ``"up"``, ``"down"`` or None (a better answer or a comment alone);
    ``answer_id`` identifies the answer (one chat turn) so a second vote on it replaces the first.
    """

    id: str
    at: float
    user: str
    model: str
    prompt: str
    answer: str
    answer_id: str
    vote: str | None = None
    better: str | None = None
    comment: str | None = None
    session: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        what = {"up": "thumbs up", "down": "thumbs down"}.get(self.vote or "", "")
        extra = ", ".join(
            x for x in (what, "better answer" if self.better else "", "comment" if self.comment else "") if x
        )
        prompt = " ".join(self.prompt.split())
        prompt = prompt if len(prompt) <= 50 else prompt[:49] + "…"
        return f"recorded {extra} from {self.user} on {self.model} for {prompt!r} (answer {self.answer_id[:12]})"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(str(self))

    @classmethod
    def from_json(cls, data: object) -> FeedbackRecord:
        if not isinstance(data, dict):
            raise ValueError("a record is a JSON object")
        rec = new_record(
            user=data.get("user"),
            model=data.get("model"),
            prompt=data.get("prompt"),
            answer=data.get("answer"),
            vote=data.get("vote"),
            better=data.get("better"),
            comment=data.get("comment"),
            answer_id=data.get("answer_id"),
            session=data.get("session"),
        )
        at, rid = data.get("at"), data.get("id")
        if not isinstance(at, int | float) or isinstance(at, bool) or not isinstance(rid, str) or not rid:
            raise ValueError("a record needs 'id' and 'at'")
        return FeedbackRecord(**{**rec.to_json(), "id": rid, "at": float(at)})


def new_record(
    *,
    user: object,
    model: object,
    prompt: object,
    answer: object,
    vote: object = None,
    better: object = None,
    comment: object = None,
    answer_id: object = None,
    session: object = None,
) -> FeedbackRecord:
    """A validated record stamped now; BadInputError says which field is wrong."""
    if vote is not None and vote not in VOTES:
        raise BadInputError(f"vote must be 'up' or 'down', not {vote!r}", field="vote", hint="thumbs up or down")
    better_text = _text(better, "better answer", required=False)
    comment_text = _text(comment, "comment", required=False)
    if vote is None and better_text is None and comment_text is None:
        raise BadInputError(
            "a feedback record needs a vote, a better answer or a comment",
            field="vote",
            hint="vote up or down, or give a better answer",
        )
    for value, name in ((answer_id, "answer_id"), (session, "session")):
        if value is not None and (not isinstance(value, str) or not 0 < len(value) <= 200 or not encodable(value)):
            raise BadInputError(f"{name} must be a short string", field=name, hint="leave it out to get a new one")
    user_text = _text(user, "user", required=True)
    model_text = _text(model, "model", required=True)
    prompt_text = _text(prompt, "prompt", required=True)
    answer_text = _text(answer, "answer", required=True)
    assert user_text and model_text and prompt_text and answer_text
    return FeedbackRecord(
        id=uuid.uuid4().hex,
        at=time.time(),
        user=user_text,
        model=model_text,
        prompt=prompt_text,
        answer=answer_text,
        answer_id=str(answer_id) if answer_id else uuid.uuid4().hex,
        vote=str(vote) if vote is not None else None,
        better=better_text,
        comment=comment_text,
        session=str(session) if session else None,
    )


def effective(records: Iterable[FeedbackRecord]) -> list[FeedbackRecord]:
    """The newest record per ``(user, answer_id)``, oldest first: what exports and counts use."""
    newest: dict[tuple[str, str], FeedbackRecord] = {}
    for rec in sorted(records, key=lambda r: (r.at, r.id)):
        newest[(rec.user, rec.answer_id)] = rec
    return sorted(newest.values(), key=lambda r: (r.at, r.id))


@dataclass
class FeedbackLog:
    """The append-only record folder of one feedback log."""

    folder: Path
    name: str
    _seen: dict[str, FeedbackRecord] = field(default_factory=dict, repr=False)

    @property
    def records_dir(self) -> Path:
        return self.folder / "records"

    def append(self, record: FeedbackRecord) -> Path:
        """Write ``record`` as a new file (temp + fsync + rename); never overwrites anything."""
        self.records_dir.mkdir(parents=True, exist_ok=True)
        final = self.records_dir / f"{time.time_ns():020d}-{record.id}.json"
        tmp = self.records_dir / f".{final.name}.tmp"
        try:
            with open(tmp, "x", encoding="utf-8") as f:
                json.dump(record.to_json(), f, ensure_ascii=False)
                f.flush()
                os.fsync(f.fileno())
            tmp.rename(final)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise StoreError(
                f"could not write a feedback record to {self.records_dir}: {e.strerror or e}",
                hint="check that the store is writable and not full",
            ) from e
        self._seen[final.name] = record
        return final

    def read(self) -> list[FeedbackRecord]:
        """Every record, oldest first; an unreadable file is logged and skipped, never fatal."""
        out: list[FeedbackRecord] = []
        if not self.records_dir.is_dir():
            return out
        for path in sorted(self.records_dir.glob("*.json")):
            if path.name.startswith("."):
                continue
            rec = self._seen.get(path.name)  # records never change: read each file once
            if rec is None:
                try:
                    rec = FeedbackRecord.from_json(json.loads(path.read_text(encoding="utf-8")))
                except (OSError, ValueError) as e:  # BadInputError is a ValueError too
                    log.warning("skipping unreadable feedback record %s: %s", path, e)
                    continue
                self._seen[path.name] = rec
            out.append(rec)
        out.sort(key=lambda r: (r.at, r.id))
        return out
