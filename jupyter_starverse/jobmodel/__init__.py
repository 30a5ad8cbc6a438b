"""The floor of the job model: what a job is, whatever runs it.

:class:`JobSpec` (what to run), :class:`Job` and :class:`NodeStatus` (what a backend
reports), :class:`JobState`, :class:`LogLine`, and the :class:`LaunchBackend` contract.
Every core package may import this one; it imports only ``errors``.
"""

from __future__ import annotations

from ._endpoint import ENGINES, SERVE_PORT, EndpointSpec
from ._model import Job, JobState, LaunchBackend, LogLine, NodeStatus, group_tail
from ._secrets import SECRET_KINDS, SecretRef, looks_secret, parse_secret_ref, secret_env_warnings
from ._spec import BILLING_MODES, FRAMEWORKS, MAX_BUDGET, TEMPLATES, JobSpec

__all__ = [
    "ENGINES",
    "SERVE_PORT",
    "EndpointSpec",
    "BILLING_MODES",
    "FRAMEWORKS",
    "TEMPLATES",
    "Job",
    "JobSpec",
    "MAX_BUDGET",
    "JobState",
    "LaunchBackend",
    "LogLine",
    "NodeStatus",
    "SECRET_KINDS",
    "SecretRef",
    "group_tail",
    "looks_secret",
    "parse_secret_ref",
    "secret_env_warnings",
]
