"""Fixtures of the Kubernetes tests: the test API server (importable by other test packages)."""

from __future__ import annotations

from tests.k8s.apiserver import kube_server

__all__ = ["kube_server"]
