"""Feedback: thumbs up/down on a model's answers, kept as a versioned dataset in the store.

``FeedbackService`` (``client.feedback``) appends records to a live log any number of
processes write at once, shows them as a table, freezes versions ``NAME@N`` in the store and
exports preference pairs and unpaired labels; ``ChatSession`` streams a model's answers from a
worker process of its own, or from a served endpoint (``EndpointChatSession``).
"""

from __future__ import annotations

from ._chat import ChatSession, ChatSessions, resolve_model
from ._endpoint import EndpointChatSession, EndpointTarget
from ._pairs import LabelExample, PreferencePair, make_labels, make_pairs
from ._records import VOTES, FeedbackRecord, effective
from ._service import EXPORT_KINDS, FeedbackLogs, FeedbackService, FeedbackSnapshot, FeedbackTable, SnapshotFile
from ._turns import ChatTurn

__all__ = [
    "EXPORT_KINDS",
    "VOTES",
    "ChatSession",
    "ChatSessions",
    "ChatTurn",
    "EndpointChatSession",
    "EndpointTarget",
    "FeedbackLogs",
    "FeedbackRecord",
    "FeedbackService",
    "FeedbackSnapshot",
    "FeedbackTable",
    "LabelExample",
    "PreferencePair",
    "SnapshotFile",
    "effective",
    "make_labels",
    "make_pairs",
    "resolve_model",
]
