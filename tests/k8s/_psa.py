"""A Pod Security Standards checker (test helper), written from the Kubernetes document
"Pod Security Standards" (https://kubernetes.io/docs/concepts/security/pod-security-standards/,
policy version v1.32), for the ``baseline`` and ``restricted`` profiles, over wire-form pods.

:func:`pods_of` finds every pod template in a rendered object (Job, JobSet, PyTorchJob, and the
JobSet template of a TrainingRuntime, whose pods a TrainJob runs); :func:`violations` lists what a
pod breaks. Each control is one function named after the document's row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["BASELINE", "RESTRICTED", "Violation", "pods_of", "violations"]

Obj = dict[str, Any]


@dataclass(frozen=True)
class Violation:
    level: str  # "baseline" or "restricted"
    control: str
    path: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.level}] {self.control} at {self.path}: {self.detail}"


# -- where the pods are ----------------------------------------------------------------
def pods_of(obj: Obj) -> Iterator[tuple[str, Obj]]:
    """(path, pod template ``{"metadata", "spec"}``) of every pod an object creates."""
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    if kind == "Job":
        yield "spec.template", spec["template"]
    elif kind == "JobSet":
        for i, rj in enumerate(spec["replicatedJobs"]):
            yield f"spec.replicatedJobs[{i}].template.spec.template", rj["template"]["spec"]["template"]
    elif kind == "PyTorchJob":
        for name, rs in spec["pytorchReplicaSpecs"].items():
            yield f"spec.pytorchReplicaSpecs.{name}.template", rs["template"]
    elif kind == "TrainingRuntime":
        for i, rj in enumerate(spec["template"]["spec"]["replicatedJobs"]):
            yield f"spec.template.spec.replicatedJobs[{i}].template.spec.template", rj["template"]["spec"]["template"]


def _containers(spec: Obj) -> Iterator[tuple[str, Obj]]:
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for i, c in enumerate(spec.get(field) or []):
            yield f"spec.{field}[{i}]", c


# -- baseline --------------------------------------------------------------------------
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
    "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}  # fmt: skip
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret",
}  # fmt: skip

Check = Callable[[Obj, Obj], Iterator[tuple[str, str]]]  # (metadata, spec) -> (path, detail)


def host_process(meta: Obj, spec: Obj) -> Iterator[tuple[str, str]]:
    if ((spec.get("securityContext") or {}).get("windowsOptions") or {}).get("hostProcess"):
        yield "spec.securityContext.windowsOptions.hostProcess", "must be unset or false"
    for path, c in _containers(spec):
        if ((c.get("securityContext") or {}).get("windowsOptions") or {}).get("hostProcess"):
            yield f"{path}.securityContext.windowsOptions.hostProcess", "must be unset or false"


def host_namespaces(meta: Obj, spec: Obj) -> Iterator[tuple[str, str]]:
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            yield f"spec.{field}", "must be unset or false"


def privileged(meta: Obj, spec: Obj) -> Iterator[tuple[str, str]]:
    for path, c in _containers(spec):
        if (c.get("securityContext") or {}).get("privileged"):
            yield f"{path}.securityContext.privileged", "must be unset or false"


def capabilities_baseline(meta: Obj, spec: Obj) -> Iterator[tuple[str, str]]:
    for path, c in _containers(spec):
        added = ((c.get("securityContext") or {}).get("capabilities") or {}).get("add") or []
        for cap in added:
            if cap not in BASELINE_CAPABILITIES:
                yield f"{path}.securityContext.capabilities.add", f"{cap} is not in the baseline list"


def host_path_volumes(meta: Obj, spec: Obj) -> Iterator[tuple[str, str]]:
    for i, v in enumerate(spec.get("volumes") or []):
        if "hostPath" in v:
            yield f"spec.volumes[{i}].hostPath", "hostPath volumes are forbidden"


def host_ports(meta: Obj, spec: Obj) -> Iterator[tuple[str, str]]:
    for path, c in _containers(spec):
        for j, p in enumerate(c.get("ports") or []):
            if p.get("hostPort"):
                yield f"{path}.ports[{j}].hostPort", "must be unset or 0"


def apparmor(meta: Obj, spec: Obj) -> Iterator[tuple[str, str]]:
    contexts = [("spec.securityContext", spec.get("securityContext") or {})]
    contexts += [(f"{p}.securityContext", c.get("securityContext") or {}) for p, c in _containers(spec)]
    for path, ctx in contexts:
        kind = (ctx.get("appArmorProfile") or {}).get("type")
        if kind not in (None, "RuntimeDefault", "Localhost"):
            yield f"{path}.appArmorProfile.type", f"{kind} is not RuntimeDefault or Localhost"
    for key, value in (meta.get("annotations") or {}).items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/"):
            if not (value == "runtime/default" or value.startswith("localhost/")):
                yield f"metadata.annotations[{key}]", f"{value} is not runtime/default or localhost/*"


def selinux(meta: Obj, spec: Obj) -> Iterator[tuple[str, str]]:
    contexts = [("spec.securityContext", spec.get("securityContext") or {})]
    contexts += [(f"{p}.securityContext", c.get("securityContext") or {}) for p, c in _containers(spec)]
    for path, ctx in contexts:
        opts = ctx.get("seLinuxOptions") or {}
        if opts.get("type", "") not in SELINUX_TYPES:
            yield f"{path}.seLinuxOptions.type", f"{opts['type']} is not an allowed type"
        for field in ("user", "role"):
            if opts.get(field):
                yield f"{path}.seLinuxOptions.{field}", "must be unset"


def proc_mount(meta: Obj, spec: Obj) -> Iterator[tuple[str, str]]:
    for path, c in _containers(spec):
        if (c.get("securityContext") or {}).get("procMount", "Default") != "Default":
            yield f"{path}.securityContext.procMount", "must be unset or Default"


def seccomp_baseline(meta: Obj, spec: Obj) -> Iterator[tuple[str, str]]:
    contexts = [("spec.securityContext", spec.get("securityContext") or {})]
    contexts += [(f"{p}.securityContext", c.get("securityContext") or {}) for p, c in _containers(spec)]
    for path, ctx in contexts:
        if (ctx.get("seccompProfile") or {}).get("type") == "Unconfined":
            yield f"{path}.seccompProfile.type", "must not be Unconfined"


def sysctls(meta: Obj, spec: Obj) -> Iterator[tuple[str, str]]:
    for s in (spec.get("securityContext") or {}).get("sysctls") or []:
        if s.get("name") not in SAFE_SYSCTLS:
            yield "spec.securityContext.sysctls", f"{s.get('name')} is not a safe sysctl"


# -- restricted ------------------------------------------------------------------------
def volume_types(meta: Obj, spec: Obj) -> Iterator[tuple[str, str]]:
    for i, v in enumerate(spec.get("volumes") or []):
        kinds = set(v) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            yield f"spec.volumes[{i}]", f"{', '.join(sorted(kinds - RESTRICTED_VOLUMES))} is not an allowed type"


def privilege_escalation(meta: Obj, spec: Obj) -> Iterator[tuple[str, str]]:
    for path, c in _containers(spec):
        if (c.get("securityContext") or {}).get("allowPrivilegeEscalation") is not False:
            yield f"{path}.securityContext.allowPrivilegeEscalation", "must be false"


def run_as_non_root(meta: Obj, spec: Obj) -> Iterator[tuple[str, str]]:
    pod = (spec.get("securityContext") or {}).get("runAsNonRoot")
    for path, c in _containers(spec):
        own = (c.get("securityContext") or {}).get("runAsNonRoot")
        if own is False or (own is None and pod is not True):
            yield f"{path}.securityContext.runAsNonRoot", "must be true here or on the pod"


def run_as_user(meta: Obj, spec: Obj) -> Iterator[tuple[str, str]]:
    if (spec.get("securityContext") or {}).get("runAsUser") == 0:
        yield "spec.securityContext.runAsUser", "must not be 0"
    for path, c in _containers(spec):
        if (c.get("securityContext") or {}).get("runAsUser") == 0:
            yield f"{path}.securityContext.runAsUser", "must not be 0"


def seccomp_restricted(meta: Obj, spec: Obj) -> Iterator[tuple[str, str]]:
    ok = ("RuntimeDefault", "Localhost")
    pod = ((spec.get("securityContext") or {}).get("seccompProfile") or {}).get("type")
    if pod is not None and pod not in ok:
        yield "spec.securityContext.seccompProfile.type", f"{pod} is not RuntimeDefault or Localhost"
    for path, c in _containers(spec):
        own = ((c.get("securityContext") or {}).get("seccompProfile") or {}).get("type")
        if own is not None and own not in ok:
            yield f"{path}.securityContext.seccompProfile.type", f"{own} is not RuntimeDefault or Localhost"
        elif own is None and pod not in ok:
            yield f"{path}.securityContext.seccompProfile", "must be set here or on the pod"


def capabilities_restricted(meta: Obj, spec: Obj) -> Iterator[tuple[str, str]]:
    for path, c in _containers(spec):
        caps = (c.get("securityContext") or {}).get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            yield f"{path}.securityContext.capabilities.drop", "must include ALL"
        for cap in caps.get("add") or []:
            if cap != "NET_BIND_SERVICE":
                yield f"{path}.securityContext.capabilities.add", f"{cap}: only NET_BIND_SERVICE may be added"


BASELINE: dict[str, Check] = {
    "HostProcess": host_process,
    "Host Namespaces": host_namespaces,
    "Privileged Containers": privileged,
    "Capabilities (baseline)": capabilities_baseline,
    "HostPath Volumes": host_path_volumes,
    "Host Ports": host_ports,
    "AppArmor": apparmor,
    "SELinux": selinux,
    "/proc Mount Type": proc_mount,
    "Seccomp (baseline)": seccomp_baseline,
    "Sysctls": sysctls,
}
RESTRICTED: dict[str, Check] = {
    "Volume Types": volume_types,
    "Privilege Escalation": privilege_escalation,
    "Running as Non-root": run_as_non_root,
    "Running as Non-root user": run_as_user,
    "Seccomp (restricted)": seccomp_restricted,
    "Capabilities (restricted)": capabilities_restricted,
}


def violations(pod: Obj, *, level: str = "restricted", where: str = "") -> list[Violation]:
    """Every control of ``level`` (``restricted`` includes ``baseline``) the pod template breaks."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    checks = [("baseline", BASELINE)] + ([("restricted", RESTRICTED)] if level == "restricted" else [])
    out = []
    for lvl, table in checks:
        for control, check in table.items():
            out += [Violation(lvl, control, f"{where}.{p}" if where else p, d) for p, d in check(meta, spec)]
    return out
