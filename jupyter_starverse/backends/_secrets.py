"""Resolving ``JobSpec.secrets`` where a job starts: the only place a secret's value is read.

A backend calls :func:`check_secrets` before it writes anything (a missing variable or a file
others can read is refused with a hint) and :func:`resolve_secrets` at the moment it starts
the job's processes (local: into the supervisor's environment; Slurm: into the environment of
``sbatch``). The values go into a process environment only: never into a file, a log line, an
error message or an answer. Kubernetes takes no ``env:``/``file:`` reference (see
:func:`kube_secret_refs`): its pods read a Kubernetes Secret by ``secretKeyRef``.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from ..errors import BadInputError, StarverseError
from ..jobmodel import JobSpec, SecretRef, parse_secret_ref

__all__ = [
    "MAX_SECRET_BYTES",
    "check_secrets",
    "kube_secret_refs",
    "resolve_secrets",
    "run_secrets",
    "secrets_for_resume",
]

MAX_SECRET_BYTES = 64 * 1024


def _flag(name: str, ref: SecretRef) -> str:
    return f"--secret {name}={ref}"


def _ref(name: str, text: str) -> SecretRef:
    ref = parse_secret_ref(text)
    if ref is None:  # JobSpec validated it; a record edited on disk may not be
        raise BadInputError(f"secret {name}: not a reference", field="secrets", hint="use env:VAR or file:/PATH")
    return ref


def _read_file(name: str, ref: SecretRef) -> str:
    path = ref.target
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise BadInputError(
            f"secret {name} ({_flag(name, ref)}): no file {path}",
            field="secrets",
            hint="write the secret into that file (chmod 600), or give another path",
        ) from None
    except OSError as e:  # ELOOP: a symlink; EACCES: not ours to read
        why = "is a symbolic link" if e.errno == 40 else f"cannot be read ({e.strerror})"
        raise BadInputError(
            f"secret {name} ({_flag(name, ref)}): {path} {why}",
            field="secrets",
            hint="name the file itself, a regular file you own with mode 600",
        ) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadInputError(f"secret {name} ({_flag(name, ref)}): {path} is not a regular file",
                                field="secrets", hint="name a regular file you own with mode 600")  # fmt: skip
        if st.st_uid != os.geteuid():
            raise BadInputError(f"secret {name} ({_flag(name, ref)}): {path} is not yours (uid {st.st_uid})",
                                field="secrets", hint="keep the secret in a file you own, with mode 600")  # fmt: skip
        if st.st_mode & 0o077:
            raise BadInputError(
                f"secret {name} ({_flag(name, ref)}): {path} can be read by others "
                f"(mode {stat.S_IMODE(st.st_mode):04o})",
                field="secrets",
                hint=f"make it private first: chmod 600 {path}",
            )
        if st.st_size > MAX_SECRET_BYTES:
            raise BadInputError(f"secret {name} ({_flag(name, ref)}): {path} is larger than 64 KiB",
                                field="secrets", hint="a secret file holds one token or key")  # fmt: skip
        data = os.read(fd, MAX_SECRET_BYTES + 1)
    finally:
        os.close(fd)
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise BadInputError(
            f"secret {name} ({_flag(name, ref)}): {path} is not UTF-8 text",
            field="secrets",
            hint="an environment variable holds text; base64-encode binary keys",
        ) from None
    text = text[:-1] if text.endswith("\n") else text
    text = text[:-1] if text.endswith("\r") else text
    if "\0" in text:
        raise BadInputError(f"secret {name} ({_flag(name, ref)}): {path} holds a NUL byte", field="secrets",
                            hint="an environment variable cannot hold NUL bytes")  # fmt: skip
    return text


def _value(name: str, ref: SecretRef, environ: Mapping[str, str], where: str) -> str:
    if ref.kind == "file":
        return _read_file(name, ref)
    var = ref.target if ref.kind == "env" else name  # a Kubernetes name/key elsewhere: the job's own variable
    if var not in environ:
        how = f"{_flag(name, ref)} reads {var}" if ref.kind == "env" else f"{where} takes secret {name} from {name}"
        raise BadInputError(
            f"secret {name}: {var} is not set in the environment that launches the job ({how})",
            field="secrets",
            hint=f"export {var} before launching (its value never reaches the run folder), "
            f"or keep it in a private file: --secret {name}=file:/PATH",
        )
    return environ[var]


def resolve_secrets(
    spec: JobSpec, *, environ: Mapping[str, str] | None = None, where: str = "this backend"
) -> dict[str, str]:
    """The job's secret variables with their values (for a process environment only, never a file)."""
    env = os.environ if environ is None else environ
    return {name: _value(name, _ref(name, text), env, where) for name, text in sorted(spec.secrets.items())}


def check_secrets(spec: JobSpec, *, environ: Mapping[str, str] | None = None, where: str = "this backend") -> None:
    """Raise :class:`BadInputError` when a secret of ``spec`` could not be resolved here (reads, keeps nothing)."""
    resolve_secrets(spec, environ=environ, where=where)


def kube_secret_refs(spec: JobSpec) -> dict[str, tuple[str, str]]:
    """``{variable: (secret, key)}`` of ``spec``; an ``env:``/``file:`` reference is refused with a hint."""
    out: dict[str, tuple[str, str]] = {}
    for name, text in sorted(spec.secrets.items()):
        ref = _ref(name, text)
        if ref.kind != "kube":
            source = (
                f"--from-file=value={ref.target}" if ref.kind == "file" else f'--from-literal=value="${ref.target}"'
            )
            secret = name.lower().replace("_", "-")
            raise BadInputError(
                f"secret {name} ({_flag(name, ref)}): Kubernetes pods read secrets from a Kubernetes Secret, "
                f"not from {ref.kind}: references of this machine",
                field="secrets",
                hint=f"create one: `kubectl create secret generic {secret} {source}`, "
                f"then launch with --secret {name}={secret}/value",
            )
        secret, key = ref.target.split("/", 1)
        out[name] = (secret, key)
    return out


def secrets_for_resume(spec: JobSpec, *, owner_uid: int, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The secrets a job resumed by someone else's command gets: those that resolve here, and only
    for a run folder of this uid (a folder of another user never makes this process read a file or
    a variable of its own into that user's job). What does not resolve is left out; the job sees
    the variable unset and says so itself."""
    if owner_uid != os.geteuid():
        return {}
    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for name, text in sorted(spec.secrets.items()):
        try:
            out[name] = _value(name, _ref(name, text), env, "the local backend")
        except BadInputError:
            continue
    return out


def run_secrets(spec_file: Path, *, strict: bool) -> dict[str, str]:
    """The secrets of the job whose ``spec.json`` is ``spec_file``, for its supervisor's environment.

    ``strict`` (a submit: this process just wrote the spec) raises on a reference that does not
    resolve; otherwise (a take-over) :func:`secrets_for_resume` applies, and a spec that cannot be
    read gives none (the supervisor reports the broken spec itself).
    """
    if strict:
        return resolve_secrets(JobSpec.from_json(json.loads(spec_file.read_text())), where="the local backend")
    try:
        owner = os.lstat(spec_file).st_uid
        spec = JobSpec.from_json(json.loads(spec_file.read_text()))
    except (OSError, ValueError, StarverseError):
        return {}
    return secrets_for_resume(spec, owner_uid=owner) if spec.secrets else {}
