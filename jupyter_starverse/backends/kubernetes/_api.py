"""The API calls of the backend, in one place: raw JSON reads, one verb per kind, pod watch.

Reads use ``_preload_content=False`` and return the wire JSON: building client models for
hundreds of pods costs more than the request itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from jupyter_starverse.backends.kubernetes._crds import CRD_INFO
from jupyter_starverse.backends.kubernetes._manifests import to_dict
from jupyter_starverse.errors import BackendUnavailableError, BadInputError
from jupyter_starverse.kube import KubeConnection, api_errors, require_kubernetes

__all__ = ["ClusterApi", "Wire", "WireList"]

Wire = dict[str, Any]
#: field validation of every create (the server refuses unknown fields; Kubernetes 1.27+)
STRICT = "Strict"
WireList = list[Wire]


class ClusterApi:
    """One connection's calls; ``kind`` is ``job`` or a key of ``CRD_INFO``."""

    def __init__(self, conn: KubeConnection) -> None:
        self.conn = conn

    def errors(self, action: str, obj: str, namespace: str | None = None) -> Any:
        """Translate what the block raises (see ``_errors``), naming ``obj``."""
        return api_errors(action=action, obj=obj, namespace=namespace or self.conn.namespace, host=self.conn.host)

    def client(self) -> Any:
        return require_kubernetes().client

    def read(self, fn: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Call a read API and return the wire JSON (no model building: lists can be large)."""
        resp = fn(*args, _preload_content=False, **kwargs)
        try:
            return dict(json.loads(resp.data))
        finally:
            resp.release_conn()

    # -- main object per kind -------------------------------------------------------
    def create_main(self, kind: str, obj: Any, ns: str) -> dict[str, Any]:
        c = self.client()
        # Strict: a field the server does not know (a typo, or a field newer than the server) is an
        # error, not a silently dropped setting
        if kind == "job":  # a V1Job: the client serialises it once
            return self.read(c.BatchV1Api(self.conn.api).create_namespaced_job, ns, obj, field_validation=STRICT)
        body = to_dict(obj)
        info = CRD_INFO[kind]
        return dict(
            c.CustomObjectsApi(self.conn.api).create_namespaced_custom_object(
                info.group, info.version, ns, info.plural, body, field_validation=STRICT
            )
        )

    def get_main(self, kind: str, name: str, ns: str) -> dict[str, Any]:
        c = self.client()
        if kind == "job":
            return self.read(c.BatchV1Api(self.conn.api).read_namespaced_job, name, ns)
        info = CRD_INFO[kind]
        return dict(
            c.CustomObjectsApi(self.conn.api).get_namespaced_custom_object(
                info.group, info.version, ns, info.plural, name
            )
        )

    def list_main(self, kind: str, ns: str, selector: str) -> WireList:
        c = self.client()
        if kind == "job":
            data = self.read(c.BatchV1Api(self.conn.api).list_namespaced_job, ns, label_selector=selector)
        else:
            info = CRD_INFO[kind]
            data = c.CustomObjectsApi(self.conn.api).list_namespaced_custom_object(
                info.group, info.version, ns, info.plural, label_selector=selector
            )
        return list(data.get("items") or [])

    def delete_main(self, kind: str, name: str, ns: str) -> None:
        c = self.client()
        if kind == "job":
            c.BatchV1Api(self.conn.api).delete_namespaced_job(name, ns, propagation_policy="Foreground")
        else:
            info = CRD_INFO[kind]
            c.CustomObjectsApi(self.conn.api).delete_namespaced_custom_object(
                info.group, info.version, ns, info.plural, name, propagation_policy="Foreground"
            )

    def set_owner(self, kind: str, name: str, ns: str, owner: Any) -> None:
        """Make ``owner`` (a ``V1OwnerReference``) the owner of custom object ``name``: deleting the
        owner then deletes it (a merge patch of ``metadata.ownerReferences``)."""
        c = self.client()
        info = CRD_INFO[kind]
        body = {"metadata": {"ownerReferences": [to_dict(owner)]}}
        c.CustomObjectsApi(self.conn.api).patch_namespaced_custom_object(
            info.group, info.version, ns, info.plural, name, body
        )

    def delete_pod(self, name: str, ns: str, *, grace: int) -> None:
        """Delete one pod with ``grace`` seconds between SIGTERM and SIGKILL (a preemption drill)."""
        self.client().CoreV1Api(self.conn.api).delete_namespaced_pod(name, ns, grace_period_seconds=grace)

    def create_dependent(self, obj: Any, ns: str) -> None:
        c = self.client()
        if obj.kind == "Service":
            self.read(c.CoreV1Api(self.conn.api).create_namespaced_service, ns, obj, field_validation=STRICT)
        else:
            self.read(c.BatchV1Api(self.conn.api).create_namespaced_job, ns, obj, field_validation=STRICT)

    def server_version(self) -> tuple[int, int]:
        """The API server's ``major.minor`` (``/version``; a provider's ``29+`` reads as 29)."""
        import re

        info = self.read(self.client().VersionApi(self.conn.api).get_code)
        major = int(re.sub(r"\D", "", str(info.get("major"))) or 0)
        minor = int(re.sub(r"\D", "", str(info.get("minor"))) or 0)
        return major, minor

    def claim_exists(self, name: str, ns: str) -> bool:
        """Whether the PersistentVolumeClaim ``name`` exists in ``ns`` (one GET)."""
        c = self.client()
        try:
            self.read(c.CoreV1Api(self.conn.api).read_namespaced_persistent_volume_claim, name, ns)
        except c.exceptions.ApiException as e:
            if e.status == 404:
                return False
            raise
        return True

    def namespace_exists(self, ns: str) -> bool | None:
        """Whether namespace ``ns`` exists; None when this user may not read namespaces."""
        c = self.client()
        try:
            self.read(c.CoreV1Api(self.conn.api).read_namespace, ns)
        except c.exceptions.ApiException as e:
            if e.status == 404:
                return False
            if e.status in (401, 403):
                return None
            raise
        return True

    def events(self, ns: str, name: str, kind: str = "Job") -> WireList:
        """The events about object ``name`` (e.g. the Job controller's ``FailedCreate``), oldest first."""
        core = self.client().CoreV1Api(self.conn.api)
        selector = f"involvedObject.name={name},involvedObject.kind={kind}"
        data = self.read(core.list_namespaced_event, ns, field_selector=selector)
        items = list(data.get("items") or [])
        return sorted(items, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))

    def check_kind(self, kind: str) -> None:
        """Raise a clear error when the cluster lacks the CRD of ``kind`` (API discovery)."""
        if kind == "job":
            return
        info = CRD_INFO[kind]
        c = self.client()
        with self.errors("look up", f"{info.crd_name} (CRD)"):
            try:
                c.CustomObjectsApi(self.conn.api).get_api_resources(info.group, info.version)
            except c.exceptions.ApiException as e:
                if e.status == 404:
                    raise BadInputError(
                        f"the cluster has no {info.kind} CRD ({info.crd_name}) for --kind {kind}",
                        field="kind",
                        hint="install its operator, or use --kind job (works on any cluster); "
                        f"check with `kubectl get crd {info.crd_name}`",
                    ) from None
                raise

    def pods(self, ns: str, selector: str) -> tuple[WireList, str]:
        data = self.read(self.client().CoreV1Api(self.conn.api).list_namespaced_pod, ns, label_selector=selector)
        return list(data.get("items") or []), str((data.get("metadata") or {}).get("resourceVersion", ""))

    def watch_pods(self, ns: str, selector: str, rv: str, timeout: int) -> Iterator[tuple[str, Wire]]:
        """Raw watch events from ``rv`` for ``timeout`` seconds; ``("EXPIRED", {})`` on 410 Gone.

        Read directly (not through ``watch.Watch``): its raw mode loses ERROR events.
        """
        from kubernetes.watch import watch as kube_watch

        iter_resp_lines: Any = kube_watch.iter_resp_lines  # untyped in the client
        core = self.client().CoreV1Api(self.conn.api)
        resp = core.list_namespaced_pod(
            ns,
            label_selector=selector,
            resource_version=rv,
            watch=True,
            timeout_seconds=timeout,
            allow_watch_bookmarks=False,
            _preload_content=False,
        )
        try:
            for line in iter_resp_lines(resp):
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    if obj.get("code") == 410:
                        yield "EXPIRED", {}
                        return
                    raise BackendUnavailableError(
                        f"watch failed: {obj.get('message')}", hint=f"retry; `kubectl get pods -n {ns} -l {selector}`"
                    )
                if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                    yield event["type"], obj
        finally:
            resp.release_conn()

    def pod_log(self, name: str, ns: str, *, follow: bool, container: str = "trainer") -> Iterator[bytes]:
        """Raw chunks of the trainer container's log (kept open until the pod ends with ``follow``);
        ``container``: its name in this kind's pods (``node`` in a TrainJob's, ``pytorch`` in a PyTorchJob's)."""
        core = self.client().CoreV1Api(self.conn.api)
        with self.errors("read logs of", f"pod {name!r}", ns):
            resp = core.read_namespaced_pod_log(name, ns, container=container, follow=follow, _preload_content=False)
        try:
            yield from resp.stream(64 * 1024)
        finally:
            resp.release_conn()
