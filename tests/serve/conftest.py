"""Fixtures for serving tests: the feedback tests' tiny Llama on the loopback Hub."""

from __future__ import annotations

from tests.feedback.conftest import client, hub, tiny_folder, tiny_ref  # noqa: F401
