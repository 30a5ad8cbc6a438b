"""A pipeline's Kubernetes export that can be applied as it is (``kubectl apply -f``).

Each step's objects are what the Kubernetes backend renders (``client.preview``); the export
adds what the backend otherwise does at submit time, and the order:

* the script reaches the pod: a ConfigMap per script step holds it, mounted read-only at
  ``/starverse/script`` and run from there (the backend copies it into the run folder on the
  store when it submits; an export has no submitter). A prep step runs the image's
  ``python -m jupyter_starverse.data._job``: nothing to copy; its pods write the new version, so
  the store is mounted read-write for them (and only them);
* the run folder exists: an init container makes it on the experiments volume;
* steps are ordered: a step's pods start with an init container that waits, through the API,
  until the Jobs it comes after have completed, and fails (failing its Job, as ``afterok``
  would) when one of them failed. It reads Jobs with a projected service-account token of a
  ServiceAccount that may only ``get`` the pipeline's Jobs (Role + RoleBinding in the file);
  the training container gets no token. Every container keeps the restricted Pod Security
  profile (non-root, no privilege escalation, all capabilities dropped, RuntimeDefault seccomp).

Why init containers and not JobSet / Argo dependencies: they need a controller the cluster may
not have; a plain Job and one ServiceAccount apply on any cluster (see notes/DECISIONS.md).
"""

from __future__ import annotations

import json
import posixpath
from pathlib import Path
from typing import Any

from jupyter_starverse.errors import BadInputError
from jupyter_starverse.jobmodel import JobSpec

__all__ = ["SCRIPT_DIR", "TOKEN_DIR", "WAIT_CODE", "applicable"]

SCRIPT_DIR = "/starverse/script"
TOKEN_DIR = "/var/run/starverse/api"  # noqa: S105 (a folder, not a secret)
_UTIL = {"cpu": "100m", "memory": "128Mi"}

#: What the wait container runs (the image's python, standard library only):
#: ``python -c WAIT_CODE NAMESPACE KIND/NAME [KIND/NAME ...]`` (``job/NAME``, ``jobset/NAME``);
#: WAIT_API, WAIT_TOKEN_DIR and WAIT_POLL override
#: the API address, the token folder and the poll interval (tests).
WAIT_CODE = """\
import json, os, ssl, sys, time, urllib.error, urllib.request
ns, names = sys.argv[1], sys.argv[2:]  # each KIND/NAME: job/NAME (batch/v1) or jobset/NAME
PATHS = {"job": ("apis/batch/v1", "jobs", "Complete"),
         "jobset": ("apis/jobset.x-k8s.io/v1alpha2", "jobsets", "Completed")}
host = os.environ.get("KUBERNETES_SERVICE_HOST", "kubernetes.default.svc")
port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
api = os.environ.get("WAIT_API") or "https://%s:%s" % (host, port)
tokens = os.environ.get("WAIT_TOKEN_DIR", "/var/run/starverse/api")
ctx = ssl.create_default_context(cafile=tokens + "/ca.crt") if api.startswith("https:") else None
poll = float(os.environ.get("WAIT_POLL", "5"))
while True:
    token = open(tokens + "/token").read().strip() if os.path.exists(tokens + "/token") else ""
    states = {}
    for name in names:
        kind, _, short = name.partition("/")
        group, plural, complete = PATHS[kind]
        req = urllib.request.Request("%s/%s/namespaces/%s/%s/%s" % (api, group, ns, plural, short))
        if token:
            req.add_header("Authorization", "Bearer " + token)
        try:
            job = json.load(urllib.request.urlopen(req, context=ctx, timeout=30))
        except urllib.error.HTTPError as e:
            if e.code != 404:
                raise
            states[name] = "not created yet"
            continue
        cond = {c.get("type"): c.get("status") for c in (job.get("status") or {}).get("conditions") or []}
        states[name] = "complete" if cond.get(complete) == "True" else "failed" if cond.get("Failed") == "True" \\
            else "running"
    failed = [n for n, s in states.items() if s == "failed"]
    if failed:
        sys.stderr.write("starverse: %s failed: this step does not run (afterok)\\n" % ", ".join(failed))
        sys.exit(1)
    if all(s == "complete" for s in states.values()):
        print("starverse: %s complete" % ", ".join(names), flush=True)
        sys.exit(0)
    print("starverse: waiting for " + ", ".join("%s (%s)" % kv for kv in states.items()), flush=True)
    time.sleep(poll)
"""


def _restricted() -> dict[str, Any]:
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"}}  # fmt: skip


def _pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    if obj.get("kind") == "Job":
        return [obj["spec"]["template"]["spec"]]
    if obj.get("kind") == "JobSet":
        return [rj["template"]["spec"]["template"]["spec"] for rj in obj["spec"]["replicatedJobs"]]
    return []


def _main(objs: list[dict[str, Any]], node: str) -> dict[str, Any]:
    found = [o for o in objs if _pod_specs(o)]
    if len(found) != 1:
        kinds = ", ".join(sorted({str(o.get("kind")) for o in objs}))
        raise BadInputError(
            f"step {node}: the export orders Jobs and JobSets, this cluster renders {kinds}",
            field="format",
            hint="export with STARVERSE_KUBE_KIND=job (or jobset), or run it: `starverse pipeline run FILE "
            "--backend kubernetes` orders any kind",
        )
    return found[0]


def _script_text(spec: JobSpec) -> tuple[str, str] | None:
    """(file name, text) of the step's script, or None when it runs a command."""
    if spec.command:
        return None
    if spec.code is not None:
        return "train.py", spec.code
    path = Path(spec.script or "").expanduser()
    try:
        return path.name, path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise BadInputError(
            f"cannot read the script {path}: {e}",
            field="script",
            hint="the export puts the script in a ConfigMap: it must be a readable text file",
        ) from None


def applicable(stem: str, steps: list[tuple[str, tuple[str, ...], JobSpec, bool, list[dict[str, Any]]]]
               ) -> list[dict[str, Any]]:  # fmt: skip
    """Every object to apply, in order: RBAC for the waits, then per step its ConfigMap and objects.

    ``steps``: (node, the nodes it comes after, its JobSpec, whether it writes the store, the
    objects the backend rendered for it).
    """
    names: dict[str, str] = {}
    ns = "default"
    out: list[dict[str, Any]] = []
    for node, after, spec, writes, objs in steps:
        main = _main(objs, node)
        name = main["metadata"]["name"]
        ns = main["metadata"].get("namespace") or ns
        names[node] = f"{main['kind'].lower()}/{name}"
        labels = dict(main["metadata"].get("labels") or {})
        script = _script_text(spec)
        if script is not None:
            out.append({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": f"{name}-script"[:253], "namespace": ns, "labels": labels},
                        "data": {script[0]: script[1]}})  # fmt: skip
        for pod in _pod_specs(main):
            _patch_pod(pod, name, ns, [names[a] for a in after if a in names], script, writes, waiter=f"{stem}-steps")
        out.extend(objs)
    waiting = any(after for _, after, _, _, _ in steps)
    if not waiting:
        return out
    account = f"{stem}-steps"[:63]
    meta = {"name": account, "namespace": ns, "labels": {"app.kubernetes.io/managed-by": "jupyter-starverse"}}
    rbac: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta, "automountServiceAccountToken": False},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta,
         "rules": _rules(names.values())},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
         "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}]},
    ]  # fmt: skip
    return rbac + out


def _rules(names: Any) -> list[dict[str, Any]]:
    """``get`` on exactly the pipeline's Jobs / JobSets, nothing else."""
    groups = {"job": ("batch", "jobs"), "jobset": ("jobset.x-k8s.io", "jobsets")}
    by_kind: dict[str, list[str]] = {}
    for ref in names:
        kind, _, name = ref.partition("/")
        by_kind.setdefault(kind, []).append(name)
    return [{"apiGroups": [groups[k][0]], "resources": [groups[k][1]], "verbs": ["get"], "resourceNames": sorted(v)}
            for k, v in sorted(by_kind.items())]  # fmt: skip


def _patch_pod(pod: dict[str, Any], name: str, ns: str, after: list[str], script: tuple[str, str] | None,
               writes: bool, *, waiter: str) -> None:  # fmt: skip
    containers = pod["containers"]
    trainer = containers[0]
    image = trainer["image"]
    run_dir = trainer.get("workingDir")
    mounts = trainer.get("volumeMounts") or []
    volumes = pod.setdefault("volumes", [])
    inits: list[dict[str, Any]] = []
    small = {"requests": dict(_UTIL), "limits": dict(_UTIL)}
    if after:
        pod["serviceAccountName"] = waiter[:63]
        volumes.append({"name": "starverse-api", "projected": {"sources": [
            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        ]}})  # fmt: skip
        inits.append({"name": "wait-for-steps", "image": image, "command": ["python", "-c", WAIT_CODE, ns, *after],
                      "securityContext": _restricted(), "resources": json.loads(json.dumps(small)),
                      "volumeMounts": [{"name": "starverse-api", "mountPath": TOKEN_DIR,
                                        "readOnly": True}]})  # fmt: skip
    experiments = [m for m in mounts if run_dir and run_dir.startswith(m["mountPath"].rstrip("/") + "/")]
    if run_dir and experiments:  # the backend makes it when it submits; here the pod does
        folder = "import pathlib, sys; pathlib.Path(sys.argv[1], 'logs').mkdir(parents=True, exist_ok=True)"
        inits.append({"name": "run-folder", "image": image, "command": ["python", "-c", folder, run_dir],
                      "securityContext": _restricted(), "resources": json.loads(json.dumps(small)),
                      "volumeMounts": [{k: v for k, v in experiments[0].items() if k != "readOnly"}]})  # fmt: skip
    pod["initContainers"] = inits + list(pod.get("initContainers") or [])
    if script is not None:
        volumes.append({"name": "starverse-script", "configMap": {"name": f"{name}-script"[:253]}})
        target = posixpath.join(SCRIPT_DIR, script[0])
        for c in containers:
            c.setdefault("volumeMounts", []).append({"name": "starverse-script", "mountPath": SCRIPT_DIR,
                                                    "readOnly": True})  # fmt: skip
            if run_dir:
                c["command"] = [target if a == f"{run_dir}/train.py" else a for a in c.get("command") or []]
                c["args"] = [target if a == f"{run_dir}/train.py" else a for a in c.get("args") or []] or None
                if c["args"] is None:
                    del c["args"]
    if writes:  # a prep step publishes the new version on the store
        for c in containers:
            for m in c.get("volumeMounts") or []:
                if m.get("name") == "store":
                    m.pop("readOnly", None)
