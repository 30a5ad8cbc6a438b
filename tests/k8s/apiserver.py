"""A Kubernetes API server for tests, speaking the REST conventions over real HTTP.

The official ``kubernetes`` client talks to it unmodified through a kubeconfig::

    with serve_kube(tmp_path) as kube:          # kube.kubeconfig is a Path
        api = kubernetes.config.new_client_from_config(str(kube.kubeconfig))

What it implements: create / get / list / replace / patch (JSON merge, strategic merge
treated as merge, JSON patch) / delete on namespaces, pods, services, events, configmaps,
secrets, jobs, deployments, statefulsets and the installed CRDs (JobSet, TrainJob and
Trainer's runtimes, PyTorchJob); label and field selectors; ``404``/``409``/``422``/``403`` Status bodies;
one global resourceVersion; watch with ``resourceVersion`` and ``timeoutSeconds`` (410 in
the stream after :meth:`KubeServer.compact`); pod logs with ``follow``; cascade deletion
through ownerReferences; API discovery (``/apis/{group}/{version}``); RBAC denials and
quotas injected by the test. Controllers (Indexed Job, JobSet, Kubeflow Trainer's TrainJob,
a scheduler and kubelet) are in ``_controllers.py``. Every request is recorded in :attr:`KubeServer.calls`.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from . import _admission, _controllers
from ._admission import MASTERS
from ._controllers import POD, Controllers, Node, PodPlan
from ._store import BUILTIN, CRDS, ApiError, Obj, Resource, Store, json_patch, match_labels, merge_patch

BUILTIN_BY_PLURAL = {r.plural: r for r in BUILTIN}
#: the Kubernetes version whose schemas strict field validation reads
K8S_VERSION = "1.32.0"

__all__ = ["Call", "KubeServer", "Node", "PodPlan", "kube_server", "serve_kube", "write_kubeconfig"]


@dataclass(frozen=True)
class Call:
    """One request the server answered."""

    method: str
    path: str
    query: str
    seconds: float = 0.0  # time the server spent answering (streams: until the stream ended)


class KubeServer:
    """The server, its store and controllers. Start with :func:`serve_kube`."""

    def __init__(
        self,
        *,
        namespaces: tuple[str, ...] = ("default",),
        crds: tuple[str, ...] = (),
        tick: float = 0.02,
        rbac: bool = False,
        version: tuple[int, int] = (1, 32),
        claims: tuple[str, ...] = ("starverse-store", "starverse-experiments"),
    ) -> None:
        self.store = Store(namespaces=namespaces)
        self.controllers = Controllers(self.store, tick=tick)
        self.controllers.admit = self.admit_pod  # the Job controller's pods pass admission too
        self.rbac = rbac  # authorize every request from the Roles and RoleBindings in the store
        self.version = version  # what /version answers
        #: bearer token -> (user, groups); the kubeconfig's own token is a cluster admin
        self.tokens: dict[str, tuple[str, tuple[str, ...]]] = {"test-token": ("kubernetes-admin", (MASTERS,))}
        for ns in namespaces:  # the claims a workspace mounts (docs/kubernetes.md): present unless a test deletes one
            for claim in claims:
                self.store.create(BUILTIN_BY_PLURAL["persistentvolumeclaims"], ns, {"metadata": {"name": claim}})
        self.resources: dict[str, Resource] = {r.plural: r for r in BUILTIN}
        for name in crds:
            self.install_crd(name)
        self.calls: list[Call] = []
        self.lock = threading.Lock()  # guards calls (one handler thread per request)
        self.forbidden: set[tuple[str, str]] = set()  # (verb, plural)
        self.quotas: dict[str, int] = {}  # plural -> max objects per namespace
        self.user = "system:serviceaccount:default:workspace"
        self.expire_watches = 0  # the next N watches from a resourceVersion get 410 Gone
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._http.daemon_threads = True
        self._http.kube = self  # type: ignore[attr-defined]
        self.stopping = False
        self.kubeconfig: Path = Path()

    @property
    def url(self) -> str:
        host, port = self._http.server_address[:2]
        return f"http://{host!s}:{port}"

    # -- test controls --------------------------------------------------------------
    def install_crd(self, name: str) -> None:
        """Install one of ``jobset``, ``trainjob`` (with Kubeflow Trainer's runtime kinds), ``pytorchjob``."""
        for key in (name, "trainingruntime", "clustertrainingruntime") if name == "trainjob" else (name,):
            res = CRDS[key]
            self.resources[res.plural] = res

    def forbid(self, verb: str, plural: str) -> None:
        """Make RBAC refuse ``verb`` (create, get, list, watch, delete, patch) on ``plural``."""
        self.forbidden.add((verb, plural))

    def add_user(self, directory: Path, user: str, *, groups: tuple[str, ...] = ()) -> Path:
        """A kubeconfig (written into ``directory``) whose bearer token authenticates as ``user``;
        with ``rbac=True`` that user may do only what RoleBindings grant."""
        token = f"token-{len(self.tokens)}"
        self.tokens[token] = (user, groups)
        safe = "".join(ch if ch.isalnum() else "-" for ch in user)
        return write_kubeconfig(Path(directory) / f"kubeconfig-{safe}", self.url, token=token)

    def apply(self, obj: Obj, namespace: str = "default") -> Obj:
        """Create an object (Role, ResourceQuota, PriorityClass, PVC, ...) as an administrator."""
        res = next(r for r in self.resources.values() if r.kind == obj["kind"])
        return self.store.create(res, namespace if res.namespaced else "", obj)

    def label_namespace(self, namespace: str, labels: dict[str, str]) -> None:
        """Label a namespace, e.g. ``pod-security.kubernetes.io/enforce=restricted``."""
        ns_res = self.resources["namespaces"]

        def add(o: Obj) -> None:
            o["metadata"]["labels"] = {**(o["metadata"].get("labels") or {}), **labels}

        self.store.mutate(ns_res, "", namespace, add)

    def admit_pod(self, namespace: str, pod: Obj) -> None:
        """Pod admission (priority class, Pod Security, quotas: ``_admission``), for any creator."""
        ns = self.store.get(self.resources["namespaces"], "", namespace)
        _admission.admit_pod(self.store, namespace, pod, namespace_labels=ns["metadata"].get("labels") or {})

    def fail_pod(self, pod: str, *, exit_code: int, disruption: str | None = None, namespace: str = "default") -> None:
        """Play the kubelet: the pod ends now, ``Failed`` with ``exit_code`` (``disruption``: the
        reason of a ``DisruptionTarget`` condition the control plane added first)."""
        self.controllers.fail(namespace, pod, exit_code=exit_code, disruption=disruption)

    def compact(self) -> None:
        """Drop the event history: watches from an older resourceVersion get 410 Gone."""
        self.store.compact()

    def set_plan(self, plan: Any) -> None:
        """``plan(pod) -> PodPlan`` decides what each pod prints and how it exits."""
        self.controllers.plan = plan

    def evict(self, pod: str, *, reason: str = "PreemptionByScheduler", namespace: str = "default") -> None:
        """Disrupt a running pod as a spot reclaim, a node drain or a preemption does."""
        self.controllers.terminate(namespace, pod, disruption=(reason, f"{reason}: the node is being reclaimed"))

    def resolve(self, name: str, namespace: str = "default") -> list[str]:
        """What the cluster DNS answers for a pod's ``<hostname>.<subdomain>`` (``_controllers.resolve``)."""
        return _controllers.resolve(self.store, name, namespace)

    def set_nodes(self, nodes: list[Node] | None) -> None:
        self.controllers.nodes = nodes

    def objects(self, plural: str, namespace: str | None = "default", labels: str = "") -> list[Obj]:
        return self.store.list(self.resources[plural], namespace, labels)[0]

    def count(self, method: str | None = None) -> int:
        return sum(method is None or c.method == method for c in self.calls)

    # -- life cycle -----------------------------------------------------------------
    def start(self) -> None:
        threading.Thread(target=self._http.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.controllers.start()

    def stop(self) -> None:
        self.stopping = True
        with self.store.lock:
            self.store.lock.notify_all()
        self.controllers.stop()
        self._http.shutdown()
        self._http.server_close()


def write_kubeconfig(
    path: Path, server: str, *, namespace: str | None = None, context: str = "test", token: str = "test-token"
) -> Path:
    """A kubeconfig with one cluster/user/context pointing at ``server`` (bearer token)."""
    ctx: dict[str, str] = {"cluster": "test", "user": "test"}
    if namespace:
        ctx["namespace"] = namespace
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {"server": server}}],
        "users": [{"name": "test", "user": {"token": token}}],
        "contexts": [{"name": context, "context": ctx}],
        "current-context": context,
    }
    path.write_text(json.dumps(config, indent=1))
    return path


@contextlib.contextmanager
def serve_kube(directory: Path, **kwargs: Any) -> Iterator[KubeServer]:
    """Run a :class:`KubeServer`; ``kube.kubeconfig`` is written into ``directory``."""
    kube = KubeServer(**kwargs)
    kube.start()
    kube.kubeconfig = write_kubeconfig(Path(directory) / "kubeconfig", kube.url)
    try:
        yield kube
    finally:
        kube.stop()


@pytest.fixture
def kube_server(tmp_path: Path) -> Iterator[KubeServer]:
    """Pytest fixture: a running server with all CRDs installed; import it into a test module."""
    with serve_kube(tmp_path, crds=tuple(CRDS)) as kube:
        yield kube


# -- HTTP ------------------------------------------------------------------------------
class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # otherwise every keep-alive request waits ~40 ms

    def log_message(self, format: str, *args: Any) -> None:
        pass

    @property
    def kube(self) -> KubeServer:
        return self.server.kube  # type: ignore[attr-defined, no-any-return]

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # -- plumbing --------------------------------------------------------------------
    def _send_json(self, code: int, body: Obj, warnings: list[str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        for text in warnings or []:  # RFC 7234 warning headers, as the API server sends them
            self.send_header("Warning", '299 - "' + text.replace('"', '\\"') + '"')
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _start_stream(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length)) if length else None

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        start = time.perf_counter()
        # Logged before the answer goes out (a client may count calls as soon as it has its
        # answer); the duration is filled in once the handler is done.
        with self.kube.lock:
            slot = len(self.kube.calls)
            self.kube.calls.append(Call(method, url.path, url.query, 0.0))
        try:
            body = self._body() if method in ("POST", "PUT", "PATCH", "DELETE") else None
            self._route(method, url.path, query, body)
        except ApiError as err:
            self._send_json(err.code, err.status())
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            self.kube.calls[slot] = Call(method, url.path, url.query, time.perf_counter() - start)

    def _route(self, method: str, path: str, query: dict[str, str], body: Any) -> None:
        parts = [p for p in path.split("/") if p]
        if parts == ["_test", "calls"]:  # not Kubernetes: lets a benchmark in another process read the log
            calls = [c.__dict__ for c in self.kube.calls]
            return self._send_json(200, {"calls": calls})
        if parts == ["version"]:
            major, minor = self.kube.version
            git = f"v{major}.{minor}.0-starverse-test"
            info = {  # every field a real /version has (the client's model requires them)
                "major": str(major),
                "minor": str(minor),
                "gitVersion": git,
                "gitCommit": "0" * 40,
                "gitTreeState": "clean",
                "buildDate": "2026-01-01T00:00:00Z",
                "goVersion": "go1.24.0",
                "compiler": "gc",
                "platform": "linux/amd64",
            }
            return self._send_json(200, info)
        if parts[:1] == ["api"]:
            group, version, rest = "", parts[1] if len(parts) > 1 else "", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        known = [r for r in self.kube.resources.values() if r.group == group and r.version == version]
        if not known:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if not rest:
            return self._send_json(200, _discovery(group, version, known))
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        plural, name, sub = rest[0], (rest[1] if len(rest) > 1 else None), (rest[2] if len(rest) > 2 else None)
        res = self.kube.resources.get(plural)
        if res is None or res.group != group or res.version != version:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        verb = _verb(method, name, query, sub)
        self._authorize(verb, res, namespace, name)
        if self.kube.rbac:
            user, groups = self._user()
            check, subresource = ("get", "log") if verb == "log" else (verb, None)
            _admission.authorize(self.kube.store, user, groups, check, res, namespace, name, subresource)
        ns = namespace or ""
        store = self.kube.store
        if verb == "watch":
            return self._watch(res, namespace, query)
        if verb == "log":
            return self._log(ns, name or "", query)
        if verb == "list":
            items, rv = store.list(res, namespace, query.get("labelSelector", ""), query.get("fieldSelector", ""))
            return self._send_json(
                200,
                {
                    "kind": f"{res.kind}List",
                    "apiVersion": res.api_version,
                    "metadata": {"resourceVersion": str(rv)},
                    "items": items,
                },
            )
        if verb == "get":
            return self._send_json(200, store.get(res, ns, name or ""))
        mode = query.get("fieldValidation") or "Warn"
        if verb == "create":
            self._check_quota(res, ns)
            body = body or {}
            warnings = _admission.strict_fields(res, body, mode, K8S_VERSION)
            if res.plural == "pods":
                meta = body.setdefault("metadata", {})
                if not meta.get("name") and meta.get("generateName"):
                    meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
                self.kube.admit_pod(ns, body)
            if res.plural == "trainjobs":
                _admission.admit_trainjob(store, ns, body)
            return self._send_json(201, store.create(res, ns, body), warnings)
        if verb == "update":
            body = body or {}
            warnings = _admission.strict_fields(res, body, mode, K8S_VERSION)
            return self._send_json(200, store.update(res, ns, name or "", body), warnings)
        if verb == "patch":
            old = store.get(res, ns, name or "")
            kind = self.headers.get("Content-Type", "")
            new = json_patch(old, body) if "json-patch" in kind else merge_patch(old, body)
            new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
            return self._send_json(200, store.update(res, ns, name or "", new))
        if verb == "delete":
            grace = (body or {}).get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
            if res.plural == "pods" and grace not in (None, "0", 0):
                pod = store.get(res, ns, name or "")
                if pod["status"].get("phase") == "Running":  # the kubelet's SIGTERM, then the pod ends
                    self.kube.controllers.terminate(ns, name or "")
                    return self._send_json(200, store.get(res, ns, name or ""))
            policy = (body or {}).get("propagationPolicy") or query.get("propagationPolicy")
            deleted = store.delete(res, ns, name or "", policy, self.kube.resources)
            return self._send_json(200, deleted)
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {path}")

    def _user(self) -> tuple[str, tuple[str, ...]]:
        """The request's user, from its bearer token (``401 Unauthorized`` for an unknown one)."""
        header = self.headers.get("Authorization", "")
        token = header.removeprefix("Bearer ").strip()
        if token not in self.kube.tokens:
            raise ApiError(401, "Unauthorized", "Unauthorized")
        return self.kube.tokens[token]

    def _authorize(self, verb: str, res: Resource, namespace: str | None, name: str | None) -> None:
        check = "get" if verb == "log" else verb
        plural = "pods/log" if verb == "log" else res.plural
        if (check, plural) in self.kube.forbidden:
            group = f'"{res.group}"'
            where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
            raise ApiError(
                403,
                "Forbidden",
                f"{res.qualified}{' ' + repr(name) if name else ''} is forbidden: User "
                f'"{self.kube.user}" cannot {check} resource "{plural}" in API group {group}{where}',
                {"kind": res.plural, "name": name or ""},
            )

    def _check_quota(self, res: Resource, namespace: str) -> None:
        limit = self.kube.quotas.get(res.plural)
        if limit is None:
            return
        used = len(self.kube.store.list(res, namespace)[0])
        if used >= limit:
            raise ApiError(
                403,
                "Forbidden",
                f"{res.qualified} is forbidden: exceeded quota: compute-quota, requested: "
                f"count/{res.qualified}=1, used: count/{res.qualified}={used}, limited: count/{res.qualified}={limit}",
            )

    def _watch(self, res: Resource, namespace: str | None, query: dict[str, str]) -> None:
        store, labels = self.kube.store, query.get("labelSelector", "")
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
        rv_text = query.get("resourceVersion", "")
        self._start_stream("application/json")

        def send(type_: str, obj: Obj) -> None:
            self._chunk(json.dumps({"type": type_, "object": obj}).encode() + b"\n")

        if rv_text not in ("", "0") and self.kube.expire_watches > 0:
            self.kube.expire_watches -= 1
            expired = ApiError(410, "Expired", f"too old resource version: {rv_text}")
            send("ERROR", expired.status())
            self._chunk(b"")
            return
        with store.lock:
            if rv_text in ("", "0"):
                items, last = store.list(res, namespace, labels)
                initial = [("ADDED", o) for o in items]
            else:
                last, initial = int(rv_text), []
        for type_, obj in initial:
            send(type_, obj)
        while not self.kube.stopping:
            gone: ApiError | None = None
            with store.lock:
                try:
                    events = store.events_since(last)
                except ApiError as err:
                    events, gone = [], err
                if not events and gone is None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    store.lock.wait(min(remaining, 0.2))
                    continue
            if gone is not None:
                send("ERROR", gone.status())
                break
            for ev in events:
                last = ev.rv
                meta = ev.obj["metadata"]
                if ev.res.plural == res.plural and namespace in (None, meta.get("namespace")):
                    if match_labels(meta.get("labels") or {}, labels):
                        send(ev.type, ev.obj)
        self._chunk(b"")

    def _log(self, namespace: str, name: str, query: dict[str, str]) -> None:
        store = self.kube.store
        pod = store.get(POD, namespace, name)
        lines = self.kube.controllers.logs.get((namespace, name))
        if lines is None:
            container = query.get("container") or pod["spec"]["containers"][0]["name"]
            waiting = next(
                (
                    cs["state"]["waiting"].get("reason")
                    for cs in pod["status"].get("containerStatuses", [])
                    if "waiting" in cs.get("state", {})
                ),
                "ContainerCreating",
            )
            raise ApiError(400, "BadRequest", f'container "{container}" in pod "{name}" is waiting to start: {waiting}')
        if query.get("follow") != "true":
            data = "".join(line + "\n" for line in lines).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self._start_stream("text/plain")
        sent = 0
        while not self.kube.stopping:
            with store.lock:
                new = lines[sent:]
                if not new:
                    try:
                        phase = store.get(POD, namespace, name)["status"]["phase"]
                    except ApiError:
                        break
                    if phase in ("Succeeded", "Failed"):
                        break
                    store.lock.wait(0.2)
                    continue
            sent += len(new)
            self._chunk("".join(line + "\n" for line in new).encode())
        self._chunk(b"")


def _verb(method: str, name: str | None, query: dict[str, str], sub: str | None) -> str:
    if sub == "log":
        return "log"
    if method == "GET":
        if query.get("watch") in ("true", "1"):
            return "watch"
        return "get" if name else "list"
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[method]


def _discovery(group: str, version: str, resources: list[Resource]) -> Obj:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": [
            {
                "name": r.plural,
                "singularName": r.kind.lower(),
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
            }
            for r in resources
        ],
    }
