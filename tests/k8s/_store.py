"""Object store of the test Kubernetes API server: resources, resourceVersions, events.

Objects are kept as the JSON the real API server would store. Every change bumps one
global ``resourceVersion`` and is appended to a bounded event history that watches read;
``compact()`` drops the history so older watches get ``410 Gone`` as on a real cluster.
"""

from __future__ import annotations

import builtins
import copy
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]

_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


@dataclass(frozen=True)
class Resource:
    """One REST resource kind: where it lives and what it is called."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


BUILTIN = (
    Resource("", "v1", "namespaces", "Namespace", namespaced=False),
    Resource("", "v1", "pods", "Pod"),
    Resource("", "v1", "services", "Service"),
    Resource("", "v1", "events", "Event"),
    Resource("", "v1", "configmaps", "ConfigMap"),
    Resource("", "v1", "secrets", "Secret"),
    Resource("batch", "v1", "jobs", "Job"),
    Resource("apps", "v1", "deployments", "Deployment"),
    Resource("apps", "v1", "statefulsets", "StatefulSet"),
    Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim"),
    Resource("", "v1", "resourcequotas", "ResourceQuota"),
    Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False),
    Resource("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
    Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False),
    Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False),
)
CRDS = {
    "jobset": Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"),
    "trainjob": Resource("trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob"),
    # Kubeflow Trainer's runtimes, installed with it (the TrainJob CRD's companions)
    "trainingruntime": Resource("trainer.kubeflow.org", "v1alpha1", "trainingruntimes", "TrainingRuntime"),
    "clustertrainingruntime": Resource(
        "trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes", "ClusterTrainingRuntime", namespaced=False
    ),
    "pytorchjob": Resource("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob"),
}


class ApiError(Exception):
    """Becomes a ``Status`` body with this code and reason."""

    def __init__(self, code: int, reason: str, message: str, details: Obj | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details or {}

    def status(self) -> Obj:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "details": self.details,
            "code": self.code,
        }


def not_found(res: Resource, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{res.qualified} "{name}" not found', {"name": name, "kind": res.plural})


def match_labels(labels: dict[str, str], selector: str) -> bool:
    """Kubernetes label selector syntax: ``a=b,c!=d,e in (x,y),f notin (z),g,!h``."""
    for term in _split_selector(selector):
        term = term.strip()
        if not term:
            continue
        m = re.match(r"^([^\s!=]+)\s+(in|notin)\s+\((.*)\)$", term)
        if m:
            key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
            if (op == "in") != (labels.get(key) in values):
                return False
        elif "!=" in term:
            key, value = (s.strip() for s in term.split("!=", 1))
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = (s.strip() for s in term.replace("==", "=").split("=", 1))
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def _split_selector(selector: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in selector:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return out


def match_fields(obj: Obj, selector: str) -> bool:
    for term in filter(None, selector.split(",")):
        key, value = term.replace("==", "=").split("=", 1)
        cur: Any = obj
        for part in key.split("."):
            cur = cur.get(part) if isinstance(cur, dict) else None
        if str(cur) != value:
            return False
    return True


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (also used for strategic merge patches)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def json_patch(target: Obj, ops: list[Obj]) -> Obj:
    """RFC 6902 subset: add, replace, remove."""
    doc = copy.deepcopy(target)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].lstrip("/").split("/")]
        parent: Any = doc
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent.setdefault(part, {})
        last = parts[-1]
        if op["op"] == "remove":
            del parent[int(last) if isinstance(parent, list) else last]
        elif isinstance(parent, list):
            if last == "-":
                parent.append(op["value"])
            else:
                parent.insert(int(last), op["value"]) if op["op"] == "add" else parent.__setitem__(
                    int(last), op["value"]
                )
        else:
            parent[last] = op["value"]
    return doc


def validate_object(res: Resource, obj: Obj) -> None:
    """The server-side rules a real API server enforces on every create."""
    meta = obj.get("metadata") or {}
    name = meta.get("name", "")
    invalid = []
    if res.kind == "Service":
        if not _DNS1035_LABEL.match(name) or len(name) > 63:
            invalid.append(f"metadata.name: Invalid value: {name!r}: a DNS-1035 label must start with a letter")
    elif not _DNS1123_SUBDOMAIN.match(name) or len(name) > 253:
        invalid.append(f"metadata.name: Invalid value: {name!r}: a lowercase RFC 1123 subdomain must consist of ...")
    for key, value in (meta.get("labels") or {}).items():
        key_name = key.rsplit("/", 1)[-1]
        if not _LABEL_NAME.match(key_name) or len(key_name) > 63:
            invalid.append(f"metadata.labels: Invalid value: {key!r}: name part must be a valid label key")
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            invalid.append(f"metadata.labels: Invalid value: {value!r}: a valid label must be 63 characters or less")
    if res.kind == "Job":
        spec = obj.get("spec") or {}
        if spec.get("completionMode", "NonIndexed") not in ("NonIndexed", "Indexed"):
            invalid.append("spec.completionMode: Unsupported value")
        if spec.get("completionMode") == "Indexed" and len(name) > 63 - 6:
            invalid.append("metadata.name: must be no more than 57 characters for Indexed jobs (pod hostnames)")
        policy = spec.get("template", {}).get("spec", {}).get("restartPolicy")
        if policy not in ("Never", "OnFailure"):
            invalid.append(f"spec.template.spec.restartPolicy: Unsupported value: {policy!r}")
    if invalid:
        raise ApiError(
            422,
            "Invalid",
            f'{res.kind} "{name}" is invalid: {"; ".join(invalid)}',
            {"name": name, "kind": res.kind, "causes": [{"message": m} for m in invalid]},
        )


@dataclass
class Event:
    rv: int
    res: Resource
    type: str
    obj: Obj


@dataclass
class Store:
    """Thread-safe object store with a global resourceVersion and an event history."""

    namespaces: tuple[str, ...] = ("default",)
    history_limit: int = 100_000
    lock: threading.Condition = field(default_factory=threading.Condition)
    objects: dict[tuple[str, str, str], Obj] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    rv: int = 100
    compacted: int = 0

    def __post_init__(self) -> None:
        ns = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
        for name in self.namespaces:
            self.create(ns, "", {"metadata": {"name": name}})

    # -- helpers ------------------------------------------------------------------
    def _bump(self, res: Resource, type_: str, obj: Obj) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.events.append(Event(self.rv, res, type_, copy.deepcopy(obj)))
        if len(self.events) > self.history_limit:
            drop = len(self.events) - self.history_limit
            self.compacted = self.events[drop - 1].rv
            del self.events[:drop]
        self.lock.notify_all()

    def compact(self) -> None:
        """Forget the event history: watches from an older resourceVersion get 410."""
        with self.lock:
            self.compacted = self.rv
            self.events.clear()

    def ensure_namespace(self, res: Resource, namespace: str) -> None:
        if res.namespaced and ("namespaces", "", namespace) not in self.objects:
            raise ApiError(
                404, "NotFound", f'namespaces "{namespace}" not found', {"name": namespace, "kind": "namespaces"}
            )

    # -- verbs --------------------------------------------------------------------
    def create(self, res: Resource, namespace: str, body: Obj) -> Obj:
        with self.lock:
            obj = copy.deepcopy(body)
            meta = obj.setdefault("metadata", {})
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            validate_object(res, obj)
            self.ensure_namespace(res, namespace)
            key = (res.plural, namespace, meta["name"])
            if key in self.objects:
                raise ApiError(
                    409,
                    "AlreadyExists",
                    f'{res.qualified} "{meta["name"]}" already exists',
                    {"name": meta["name"], "kind": res.plural},
                )
            obj["apiVersion"], obj["kind"] = res.api_version, res.kind
            if res.namespaced:
                meta["namespace"] = namespace
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            meta["generation"] = 1
            self.objects[key] = obj
            self._bump(res, "ADDED", obj)
            return copy.deepcopy(obj)

    def get(self, res: Resource, namespace: str, name: str) -> Obj:
        with self.lock:
            obj = self.objects.get((res.plural, namespace, name))
            if obj is None:
                raise not_found(res, name)
            return copy.deepcopy(obj)

    def list(self, res: Resource, namespace: str | None, labels: str = "", fields: str = "") -> tuple[list[Obj], int]:
        with self.lock:
            items = [
                copy.deepcopy(o)
                for (plural, ns, _), o in self.objects.items()
                if plural == res.plural
                and (namespace is None or ns == namespace)
                and match_labels(o["metadata"].get("labels") or {}, labels)
                and match_fields(o, fields)
            ]
            return items, self.rv

    def update(self, res: Resource, namespace: str, name: str, obj: Obj, *, spec_changed: bool = True) -> Obj:
        with self.lock:
            old = self.objects.get((res.plural, namespace, name))
            if old is None:
                raise not_found(res, name)
            want = obj.get("metadata", {}).get("resourceVersion")
            if want and want != old["metadata"]["resourceVersion"]:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {res.qualified} "{name}": the object has been modified',
                )
            obj = copy.deepcopy(obj)
            for key in ("uid", "creationTimestamp", "namespace", "name"):
                if key in old["metadata"]:
                    obj["metadata"][key] = old["metadata"][key]
            obj["apiVersion"], obj["kind"] = res.api_version, res.kind
            if spec_changed and obj.get("spec") != old.get("spec"):
                obj["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
            validate_object(res, obj)
            self.objects[(res.plural, namespace, name)] = obj
            self._bump(res, "MODIFIED", obj)
            return copy.deepcopy(obj)

    def mutate(self, res: Resource, namespace: str, name: str, fn: Any) -> Obj | None:
        """Apply ``fn(obj)`` in place under the lock (used by controllers); None if gone."""
        with self.lock:
            obj = self.objects.get((res.plural, namespace, name))
            if obj is None:
                return None
            before = copy.deepcopy(obj)
            fn(obj)
            if obj != before:
                self._bump(res, "MODIFIED", obj)
            return copy.deepcopy(obj)

    def delete(
        self, res: Resource, namespace: str, name: str, propagation: str | None, registry: dict[str, Resource]
    ) -> Obj:
        with self.lock:
            obj = self.objects.get((res.plural, namespace, name))
            if obj is None:
                raise not_found(res, name)
            # batch/v1 Jobs orphan their pods unless asked otherwise (legacy REST default).
            policy = propagation or ("Orphan" if res.kind == "Job" else "Background")
            if policy != "Orphan":
                uid = obj["metadata"]["uid"]
                for (plural, ns, child), other in list(self.objects.items()):
                    owners = other["metadata"].get("ownerReferences") or []
                    if ns == namespace and any(o.get("uid") == uid for o in owners):
                        self.delete(registry[plural], ns, child, "Background", registry)
            del self.objects[(res.plural, namespace, name)]
            obj["metadata"]["deletionTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            self._bump(res, "DELETED", obj)
            return copy.deepcopy(obj)

    def events_since(self, rv: int) -> builtins.list[Event]:
        """Events after ``rv``; raise 410 when that part of the history is gone."""
        if rv < self.compacted:
            raise ApiError(410, "Expired", f"too old resource version: {rv} ({self.compacted})")
        lo, hi = 0, len(self.events)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.events[mid].rv <= rv:
                lo = mid + 1
            else:
                hi = mid
        return self.events[lo:]
