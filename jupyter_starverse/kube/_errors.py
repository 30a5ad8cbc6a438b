"""The one place where Kubernetes API failures become our errors, each with a ``kubectl`` hint."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from typing import Any

from jupyter_starverse.errors import (
    BackendUnavailableError,
    BadInputError,
    ConflictError,
    NotFoundError,
    PermissionDeniedError,
    StarverseError,
)

__all__ = ["api_errors", "status_of", "translate"]


def status_of(exc: Any) -> tuple[int, str, str]:
    """(code, reason, message) of an ``ApiException`` from its Status body when it has one."""
    code = int(getattr(exc, "status", 0) or 0)
    try:
        body = json.loads(getattr(exc, "body", None) or "{}")
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    return code, str(body.get("reason") or getattr(exc, "reason", "") or ""), str(body.get("message") or exc)


def translate(exc: Exception, *, action: str, obj: str, namespace: str, host: str = "") -> StarverseError:
    """An ``ApiException`` or connection error as one of our errors (the message names ``obj``)."""
    code, reason, message = status_of(exc)
    what = f"{action} {obj} in namespace {namespace!r}"
    if code == 0:
        return BackendUnavailableError(
            f"cannot reach the Kubernetes API server{' at ' + host if host else ''} to {what}: {exc}",
            hint="check the cluster and your kubeconfig: `kubectl cluster-info`",
        )
    if code == 401:
        return PermissionDeniedError(
            f"the Kubernetes API server rejected our credentials to {what}",
            hint="refresh the credentials in your kubeconfig: `kubectl auth whoami`",
        )
    if code == 403 and "exceeded quota" in message:
        return ConflictError(
            f"resource quota exceeded to {what}: {message}",
            hint=f"see `kubectl describe resourcequota -n {namespace}`; cancel other jobs or ask for more quota",
        )
    if code == 403:
        return PermissionDeniedError(f"forbidden to {what}: {message}", hint=_forbidden_hint(message, namespace))
    if code == 404 and message.startswith("namespaces "):
        return NotFoundError(
            f"namespace {namespace!r} does not exist (while trying to {what})",
            hint=f"create it (`kubectl create namespace {namespace}`) or set STARVERSE_NAMESPACE",
        )
    if code == 404 and "could not find the requested resource" in message:
        return BackendUnavailableError(
            f"the cluster does not serve {obj.split(' ')[0]} (is its CRD installed?) to {what}",
            hint="install the operator, or use the default kind: STARVERSE_KUBE_KIND=job; "
            "check with `kubectl api-resources`",
        )
    if code == 404:
        return NotFoundError(f"{obj} not found in namespace {namespace!r}", hint=f"`kubectl get {obj} -n {namespace}`")
    if code == 409:
        return ConflictError(
            f"{obj} already exists in namespace {namespace!r}: {message}",
            hint=f"`kubectl get {obj} -n {namespace}`; submit again for a new job id",
        )
    if code == 422 or code == 400:
        return BadInputError(
            f"the cluster refused to {what}: {message}",
            hint="`kubectl apply --dry-run=server -f` the output of `starverse launch --dry-run -o yaml`",
        )
    return BackendUnavailableError(
        f"the Kubernetes API server failed to {what}: {code} {reason}: {message}",
        hint=f"retry; check `kubectl get events -n {namespace}`",
    )


@contextlib.contextmanager
def api_errors(*, action: str, obj: str, namespace: str, host: str = "") -> Iterator[None]:
    """Translate whatever the client raises inside the block (raised ``from`` the original)."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        yield
    except ApiException as e:
        raise translate(e, action=action, obj=obj, namespace=namespace, host=host) from e
    except (HTTPError, OSError) as e:
        raise translate(e, action=action, obj=obj, namespace=namespace, host=host) from e


_DENIED = re.compile(r'User "([^"]*)" cannot ([\w-]+) resource "([^"]+)" in API group "([^"]*)"')


def _forbidden_hint(message: str, namespace: str) -> str:
    """What exactly to grant: the verb and resource the server refused (its RBAC message names
    them), as a Role rule and the ``kubectl auth can-i`` check."""
    m = _DENIED.search(message)
    if m is None:
        return (
            "grant the service account (or your user) the workspace Role of docs/kubernetes.md; "
            f"check `kubectl auth can-i --list -n {namespace}`"
        )
    user, verb, resource, group = m.groups()
    rule = f'{{apiGroups: ["{group}"], resources: ["{resource}"], verbs: ["{verb}"]}}'
    return (
        f"{user} may not {verb} {resource}" + (f" ({group})" if group else "") + f" in {namespace}: add the rule "
        f"{rule} to the Role bound to that service account or user (the launcher's Role: rbac.yaml in "
        "jupyter_starverse/backends/kubernetes); "
        f"check `kubectl auth can-i {verb} {resource} -n {namespace} --as {user}`"
    )
