"""What the test API server refuses, rule by rule, as the control plane does.

Each rule is one function whose docstring names the Kubernetes documentation page it follows.
They run on every request (RBAC, strict field validation) or on every pod creation, whoever
creates the pod: a client, or the Job controller (which then records a ``FailedCreate`` event
on the Job, as ``job-controller`` does). Errors are :class:`ApiError` with the real server's
code, reason and message shape.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from fractions import Fraction
from typing import Any

from jupyter_starverse.kube import parse_quantity

from . import _psa
from ._store import BUILTIN, CRDS, ApiError, Obj, Resource, Store

__all__ = ["PRIORITY_CLASSES", "QUOTAS", "RBAC", "authorize", "admit_pod", "strict_fields"]

RBAC_GROUP = "rbac.authorization.k8s.io"
_BY_PLURAL = {r.plural: r for r in BUILTIN}
RBAC = tuple(_BY_PLURAL[p] for p in ("roles", "rolebindings", "clusterroles", "clusterrolebindings"))
QUOTAS = _BY_PLURAL["resourcequotas"]
PRIORITY_CLASSES = _BY_PLURAL["priorityclasses"]
POD = _BY_PLURAL["pods"]
#: shipped with every cluster (https://kubernetes.io/docs/concepts/scheduling-eviction/pod-priority-preemption/)
SYSTEM_PRIORITY_CLASSES = ("system-cluster-critical", "system-node-critical")
#: what a cluster administrator is: ``system:masters`` bypasses authorization
MASTERS = "system:masters"


# -- RBAC ------------------------------------------------------------------------------
def authorize(
    store: Store,
    user: str,
    groups: Iterable[str],
    verb: str,
    res: Resource,
    namespace: str | None,
    name: str | None,
    subresource: str | None = None,
) -> None:
    """RBAC authorization, from https://kubernetes.io/docs/reference/access-authn-authz/rbac/:
    a request is allowed when a Role bound in its namespace by a RoleBinding (or a ClusterRole
    bound by a RoleBinding there or by a ClusterRoleBinding) has a rule matching its API group,
    resource (``pods/log`` for a subresource), verb and, when the rule lists ``resourceNames``,
    the object's name. Subjects: ``User``, ``Group`` and ``ServiceAccount``
    (``system:serviceaccount:<ns>:<name>``). Denied: ``403 Forbidden`` with the real message
    (``User "u" cannot delete resource "pods" in API group "" in the namespace "ns"``).
    """
    groups = set(groups) | {"system:authenticated"}
    if MASTERS in groups:
        return
    plural = f"{res.plural}/{subresource}" if subresource else res.plural
    for rule in _rules_of(store, user, groups, namespace):
        if (
            _has(rule.get("apiGroups"), res.group)
            and _has(rule.get("resources"), plural)
            and _has(rule.get("verbs"), verb)
            and (not rule.get("resourceNames") or (name is not None and name in rule["resourceNames"]))
        ):
            return
    where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
    what = f'{res.qualified} "{name}"' if name else res.qualified
    raise ApiError(
        403,
        "Forbidden",
        f'{what} is forbidden: User "{user}" cannot {verb} resource "{plural}" in API group "{res.group}"{where}',
        {"name": name or "", "group": res.group, "kind": res.plural},
    )


def _has(values: list[str] | None, want: str) -> bool:
    return bool(values) and ("*" in values or want in values)  # type: ignore[operator]


def _bound(binding: Obj, user: str, groups: set[str]) -> bool:
    for s in binding.get("subjects") or []:
        kind, name = s.get("kind"), s.get("name")
        if kind == "User" and name == user:
            return True
        if kind == "Group" and name in groups:
            return True
        if kind == "ServiceAccount":
            ns = s.get("namespace") or binding["metadata"].get("namespace", "")
            if user == f"system:serviceaccount:{ns}:{name}":
                return True
    return False


def _rules_of(store: Store, user: str, groups: set[str], namespace: str | None) -> list[Obj]:
    roles, role_bindings, cluster_roles, cluster_bindings = RBAC
    bindings = [(b, b["metadata"].get("namespace")) for b in store.list(cluster_bindings, None)[0]]
    if namespace:
        bindings += [(b, namespace) for b in store.list(role_bindings, namespace)[0]]
    rules: list[Obj] = []
    for binding, ns in bindings:
        if not _bound(binding, user, groups):
            continue
        ref = binding.get("roleRef") or {}
        try:
            role = (
                store.get(roles, ns or "", ref.get("name", ""))
                if ref.get("kind") == "Role"
                else store.get(cluster_roles, "", ref.get("name", ""))
            )
        except ApiError:
            continue  # a binding to a missing role grants nothing
        rules += role.get("rules") or []
    return rules


# -- pod admission ---------------------------------------------------------------------
def admit_pod(store: Store, namespace: str, pod: Obj, *, namespace_labels: dict[str, str]) -> None:
    """Every admission rule of a pod create, in the API server's order (priority, quota, PSA)."""
    check_priority_class(store, pod)
    check_pod_security(pod, namespace_labels)
    check_quota(store, namespace, pod)


def check_priority_class(store: Store, pod: Obj) -> None:
    """The ``Priority`` admission plugin
    (https://kubernetes.io/docs/concepts/scheduling-eviction/pod-priority-preemption/#pod-priority):
    a pod naming a PriorityClass that does not exist is refused (``403``, ``no PriorityClass with
    name X was found``); the two ``system-*`` classes always exist."""
    name = (pod.get("spec") or {}).get("priorityClassName")
    if not name or name in SYSTEM_PRIORITY_CLASSES:
        return
    try:
        store.get(PRIORITY_CLASSES, "", name)
    except ApiError:
        raise ApiError(
            403, "Forbidden", f'pods "{_name(pod)}" is forbidden: no PriorityClass with name {name} was found'
        ) from None


def check_pod_security(pod: Obj, namespace_labels: dict[str, str]) -> None:
    """Pod Security Admission (https://kubernetes.io/docs/concepts/security/pod-security-admission/):
    a namespace labelled ``pod-security.kubernetes.io/enforce=<level>`` refuses a pod that breaks
    that level of https://kubernetes.io/docs/concepts/security/pod-security-standards/ (``403``,
    ``violates PodSecurity "restricted:latest": ...``). Enforcement is on pods only: a Job whose
    template breaks the level is created, and its pods are refused (``FailedCreate`` on the Job)."""
    level = namespace_labels.get("pod-security.kubernetes.io/enforce", "privileged")
    if level not in ("baseline", "restricted"):
        return
    version = namespace_labels.get("pod-security.kubernetes.io/enforce-version", "latest")
    found = _psa.violations({"metadata": pod.get("metadata") or {}, "spec": pod.get("spec") or {}}, level=level)
    if found:
        parts = ", ".join(f"{v.control} ({v.path}: {v.detail})" for v in found)
        raise ApiError(
            403, "Forbidden", f'pods "{_name(pod)}" is forbidden: violates PodSecurity "{level}:{version}": {parts}'
        )


_TRACKED = re.compile(r"^(requests\.|limits\.)?(cpu|memory|ephemeral-storage|[\w.-]+/[\w.-]+)$")


def pod_usage(pod: Obj) -> dict[str, Fraction]:
    """A pod's effective requests and limits: the larger of its containers' sum and its largest
    init container (https://kubernetes.io/docs/concepts/workloads/pods/init-containers/#resource-sharing-within-containers)."""
    spec = pod.get("spec") or {}
    out: dict[str, Fraction] = {}
    for kind in ("requests", "limits"):
        total: dict[str, Fraction] = {}
        for c in spec.get("containers") or []:
            for k, v in ((c.get("resources") or {}).get(kind) or {}).items():
                total[k] = total.get(k, Fraction(0)) + parse_quantity(str(v))
        for c in spec.get("initContainers") or []:
            for k, v in ((c.get("resources") or {}).get(kind) or {}).items():
                total[k] = max(total.get(k, Fraction(0)), parse_quantity(str(v)))
        for k, v in total.items():
            out[f"{kind}.{k}"] = v
    return out


def check_quota(store: Store, namespace: str, pod: Obj) -> None:
    """ResourceQuota admission (https://kubernetes.io/docs/concepts/policy/resource-quotas/):
    for every quota of the namespace, a pod whose requests/limits (``requests.cpu``, ``cpu``,
    ``limits.memory``, ``requests.nvidia.com/gpu``, ...) or count (``pods``, ``count/pods``) would
    take the namespace's non-terminal pods past ``spec.hard`` is refused (``403``,
    ``exceeded quota: NAME, requested: ..., used: ..., limited: ...``); a quota on a compute
    resource refuses a pod that does not state it (``must specify``)."""
    quotas = store.list(QUOTAS, namespace)[0]
    if not quotas:
        return
    pods = [
        p for p in store.list(POD, namespace)[0] if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]
    want = pod_usage(pod)
    for quota in quotas:
        hard = (quota.get("spec") or {}).get("hard") or {}
        exceeded, requested, used, limited, missing = [], [], [], [], []
        for key, limit_text in sorted(hard.items()):
            limit = parse_quantity(str(limit_text))
            if key in ("pods", "count/pods"):
                ask, have = Fraction(1), Fraction(len(pods))
            elif _TRACKED.match(key) and not key.startswith("count/"):
                full = key if key.startswith(("requests.", "limits.")) else f"requests.{key}"
                if full not in want:
                    if full.split(".", 1)[1] in ("cpu", "memory"):
                        missing.append(full)
                    continue
                ask = want[full]
                have = sum((pod_usage(p).get(full, Fraction(0)) for p in pods), Fraction(0))
            else:
                continue
            if have + ask > limit:
                exceeded.append(key)
                requested.append(f"{key}={_fmt(ask)}")
                used.append(f"{key}={_fmt(have)}")
                limited.append(f"{key}={limit_text}")
        name = quota["metadata"]["name"]
        if missing:
            need = ",".join(missing)
            raise ApiError(
                403, "Forbidden", f'pods "{_name(pod)}" is forbidden: failed quota: {name}: must specify {need}'
            )
        if exceeded:
            raise ApiError(
                403,
                "Forbidden",
                f'pods "{_name(pod)}" is forbidden: exceeded quota: {name}, requested: {",".join(requested)}, '
                f"used: {','.join(used)}, limited: {','.join(limited)}",
            )


def _fmt(value: Fraction) -> str:
    if value.denominator == 1:
        n = int(value)
        for unit, size in (("Gi", 2**30), ("Mi", 2**20)):
            if n and n % size == 0:
                return f"{n // size}{unit}"
        return str(n)
    return f"{int(value * 1000)}m"


def _name(pod: Obj) -> str:
    return str((pod.get("metadata") or {}).get("name") or "")


# -- Kubeflow Trainer's TrainJob webhook -------------------------------------------------
TRAINER_WEBHOOK = "validator.trainjob.trainer.kubeflow.org"


def admit_trainjob(store: Store, namespace: str, body: Obj) -> None:
    """Kubeflow Trainer's validating webhook on TrainJob creation (kubeflow/trainer
    ``pkg/webhooks/trainjob_webhook.go`` -> ``TrainingRuntime.ValidateObjects``): the runtime named
    by ``spec.runtimeRef`` must exist (a TrainingRuntime in the TrainJob's namespace, or a
    ClusterTrainingRuntime), else ``403`` ``admission webhook ... denied the request: spec.runtimeRef:
    Invalid value: ...: specified trainingRuntime must be created before the TrainJob is created``."""
    ref = (body.get("spec") or {}).get("runtimeRef") or {}
    kind = ref.get("kind") or "ClusterTrainingRuntime"
    key = "trainingruntime" if kind == "TrainingRuntime" else "clustertrainingruntime"
    res = CRDS[key]
    try:
        store.get(res, namespace if res.namespaced else "", str(ref.get("name") or ""))
    except ApiError as err:
        raise ApiError(
            403,
            "Forbidden",
            f'admission webhook "{TRAINER_WEBHOOK}" denied the request: spec.runtimeRef: Invalid value: '
            f"{json.dumps(ref)}: {err.message}: specified {kind[0].lower() + kind[1:]} must be created "
            "before the TrainJob is created",
        ) from None


# -- strict field validation ------------------------------------------------------------
def strict_fields(res: Resource, body: Obj, mode: str, k8s_version: str) -> list[str]:
    """Field validation (https://kubernetes.io/docs/reference/using-api/api-concepts/#field-validation):
    fields the kind's schema does not know are refused with ``fieldValidation=Strict`` (``400``,
    ``strict decoding error: unknown field "spec.x"``), dropped with a warning with ``Warn`` (the
    default) and dropped silently with ``Ignore``. Returns the warnings; prunes ``body`` in place.
    Built-in kinds only (their OpenAPI schemas, from ``kubernetes-validate``)."""
    unknown = unknown_fields(res, body, k8s_version)
    if not unknown:
        return []
    if mode == "Strict":
        fields = ", ".join(f'unknown field "{path}"' for path, _, _ in unknown)
        raise ApiError(
            400,
            "BadRequest",
            f'{res.kind} in version "{res.version}" cannot be handled as a {res.kind}: strict decoding error: {fields}',
        )
    for _, parent, key in unknown:
        parent.pop(key, None)
    return [] if mode == "Ignore" else [f'unknown field "{path}"' for path, _, _ in unknown]


def unknown_fields(res: Resource, body: Obj, k8s_version: str) -> list[tuple[str, Obj, str]]:
    """``(path, parent object, key)`` of every field the kind's strict schema refuses."""
    validator = _strict_validator(res.api_version, res.kind, k8s_version)
    if validator is None:
        return []
    doc = {**body, "apiVersion": res.api_version, "kind": res.kind}
    out: list[tuple[str, Obj, str]] = []
    for error in validator.iter_errors(doc):
        if error.validator != "additionalProperties":
            continue
        parent: Any = doc
        path = ""
        for part in error.absolute_path:
            parent = parent[part]
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        allowed = set((error.schema or {}).get("properties") or {})
        for key in [k for k in parent if k not in allowed]:
            out.append((f"{path}.{key}" if path else key, parent if parent is not doc else body, key))
    return out


@functools.cache
def _strict_validator(api_version: str, kind: str, k8s_version: str) -> Any:
    """The strict JSON schema of a built-in kind, as ``kubernetes-validate`` ships it (None: no schema)."""
    try:
        from kubernetes_validate import utils
    except ImportError:  # pragma: no cover - the test extra has it
        return None
    import jsonschema
    from referencing import Resource as SchemaResource

    version = [v for v in utils.all_versions() if utils.major_minor(v) <= utils.major_minor(k8s_version)][-1]
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    folder = f"kubernetes-json-schema/v{version}-local-strict"
    try:
        schema = utils.schema_contents(f"{folder}/{kind.lower()}-{group}.json", k8s_version)
    except FileNotFoundError:
        return None
    registry = SchemaResource.from_contents(schema) @ _definitions(folder, k8s_version)
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


@functools.cache
def _definitions(folder: str, k8s_version: str) -> Any:
    """The shared definitions every kind's schema refers to (several MB: read once)."""
    from kubernetes_validate import utils
    from referencing import Registry
    from referencing import Resource as SchemaResource

    return SchemaResource.from_contents(utils.schema_contents(f"{folder}/_definitions.json", k8s_version)) @ Registry()
