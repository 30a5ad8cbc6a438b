"""Fixtures of the data tests: the loopback Hub of the catalog tests, a raw corpus in the store."""

from __future__ import annotations

from tests.catalog.conftest import hub  # noqa: F401 - the loopback Hub stand-in
