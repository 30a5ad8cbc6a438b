"""Materialise a :class:`Lock` once on the store: wheels, ``pip install --target``, publish by rename.

Single-flight: whoever takes the lease ``env.<hash>`` builds; everyone else (another kernel, 128
nodes) waits for ``env.json`` to appear and builds nothing. The build goes to a temp folder beside
the final one, is made read-only, the lease's fence is checked, then one ``rename`` publishes it:
nobody ever sees half an environment. A failed build raises with pip's own error and the package.

Wheels: a notebook lock installs exact pins without dependencies from ``envs/wheels/``. A wheel
missing there is made from the kernel's own installed files (their ``RECORD``; what pip installed
from any index or file, without reaching that index again); anything else must already be in the
cache or on pip's configured index / ``--find-links`` (``PIP_FIND_LINKS``).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib.metadata as md
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_starverse._volume import PUBLIC, make_dir, write_atomic
from jupyter_starverse.catalog._lease import Lease  # the store's NFS-safe single-flight
from jupyter_starverse.errors import LockTimeoutError, StoreError

from ._capture import Dist, Lock, norm
from ._layout import EnvPaths

__all__ = ["BuildResult", "EnvRecord", "build_env", "make_wheel", "read_record", "tree_size"]

_RO_FILE, _RO_DIR, _RW_DIR = 0o444, 0o555, 0o755  # a published environment is read-only for everyone
_SKIP_INFO = ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")


@dataclass(frozen=True)
class EnvRecord:
    """``env.json``: what one environment on the store holds."""

    id: str
    lock: dict[str, Any]
    packages: tuple[str, ...]
    size: int
    build_s: float
    built: float
    owner: int

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "lock": self.lock, "packages": list(self.packages), "size": self.size,
                "build_s": self.build_s, "built": self.built, "owner": self.owner}  # fmt: skip

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EnvRecord:
        return cls(str(data["id"]), dict(data.get("lock") or {}), tuple(str(p) for p in data.get("packages", ())),
                   int(data.get("size", 0)), float(data.get("build_s", 0.0)), float(data.get("built", 0.0)),
                   int(data.get("owner", -1)))  # fmt: skip


@dataclass(frozen=True)
class BuildResult:
    """One ``build_env`` call: the record, whether this call built it, and how long it took here."""

    record: EnvRecord
    built: bool
    seconds: float
    wheels_made: int = 0


def read_record(path: Path) -> EnvRecord | None:
    """``env.json``, or None when it is missing or malformed (a record on the volume is data)."""
    try:
        return EnvRecord.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def tree_size(root: Path) -> int:
    total = 0
    for folder, _dirs, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(f"{folder}/{name}").st_size
    return total


def _wheel_name(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name)


def find_wheel(cache: Path, dist: Dist) -> Path | None:
    prefix = f"{_wheel_name(dist.name)}-{dist.version}-".lower()
    if not cache.is_dir():
        return None
    for path in cache.iterdir():
        if path.name.lower().startswith(prefix) and path.suffix == ".whl":
            return path
    return None


def _record_line(arc: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arc},sha256={digest},{len(data)}"


def make_wheel(dist: Dist, cache: Path, *, paths: list[str] | None = None) -> Path | None:
    """A wheel of ``dist`` made from its installed files (``RECORD``), into ``cache``; None when it has none.

    Files installed outside its site folder (console scripts) are left out; the ``.dist-info`` keeps
    its METADATA, WHEEL (tags) and entry points, and gets a new RECORD.
    """
    if dist.location is None:
        return None
    found = [d for d in md.distributions(path=[dist.location]) if norm(d.metadata["Name"] or "") == dist.key]
    if not found or not found[0].files:
        return None
    installed = found[0]
    info = f"{_wheel_name(dist.name)}-{dist.version}.dist-info"
    wheel_meta = installed.read_text("WHEEL") or ""
    tags = [line.split(":", 1)[1].strip() for line in wheel_meta.splitlines() if line.startswith("Tag:")]
    tag = tags[0] if tags else "py3-none-any"
    make_dir(cache, PUBLIC)
    target = cache / f"{_wheel_name(dist.name)}-{dist.version}-{tag}.whl"
    tmp = cache / f".{target.name}.{uuid.uuid4().hex}.tmp"
    records: list[str] = []
    base = Path(dist.location)
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
            for f in installed.files or ():
                rel = str(f).replace("\\", "/")
                if rel.startswith("../") or "/__pycache__/" in f"/{rel}" or rel.endswith(".pyc"):
                    continue
                parts = rel.split("/")
                if parts[0].endswith(".dist-info"):
                    if len(parts) == 2 and parts[1] in _SKIP_INFO:
                        continue
                    arc = "/".join([info, *parts[1:]])
                else:
                    arc = rel
                src = base / rel
                if not src.is_file():
                    continue
                data = src.read_bytes()
                zf.writestr(arc, data)
                records.append(_record_line(arc, data))
            records.append(f"{info}/RECORD,,")
            zf.writestr(f"{info}/RECORD", "\n".join(records) + "\n")
        tmp.chmod(0o644)
        tmp.replace(target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return target


def _failed_package(text: str, lock: Lock) -> str:
    for pattern in (r"No matching distribution found for ([^\s]+)", r"satisfies the requirement ([^\s]+)",
                    r"Could not install packages.*?'([^']+)'", r"ERROR: ([^\s:]+)==\S+ .*"):  # fmt: skip
        m = re.search(pattern, text)
        if m:
            return m.group(1)
    return ", ".join(lock.requirements[:5]) + (" ..." if len(lock.requirements) > 5 else "")


def _pip(lock: Lock, site: Path, cache: Path, *, python_version: str | None) -> None:
    argv = [sys.executable, "-m", "pip", "install", "--target", str(site), "--no-compile",
            "--disable-pip-version-check", "--no-input", "--quiet", "--find-links", str(cache)]  # fmt: skip
    if lock.kind == "notebook":
        argv += ["--no-deps", "--no-index"]
    if python_version and python_version != f"{sys.version_info[0]}.{sys.version_info[1]}":
        argv += ["--python-version", python_version, "--only-binary=:all:"]
    argv += list(lock.requirements)
    env = {k: v for k, v in os.environ.items() if k not in ("PIP_TARGET", "PIP_PREFIX", "PIP_USER")}
    try:
        out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=3600, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        raise StoreError(
            f"the environment could not be built: pip did not run ({e})",
            hint="check that pip is installed for this Python (`python -m pip --version`)",
        ) from e
    if out.returncode:
        text = (out.stderr or out.stdout).strip()
        package = _failed_package(text, lock)
        tail = "\n".join(text.splitlines()[-12:])
        raise StoreError(
            f"the job's environment could not be built: pip failed on {package}:\n{tail}",
            hint=f"fix or remove {package} (`pip install {package}` in the notebook shows the same error), put its "
            "wheel in the store's envs/wheels/ or on PIP_FIND_LINKS, or launch with --env-from image",
        )


def _prune(site: Path, image: dict[str, str]) -> None:
    """A resolved file lock may pull in what the image has: leave those to the image."""
    for dist in md.distributions(path=[str(site)]):
        name = dist.metadata["Name"] or ""
        if norm(name) not in image:
            continue
        for f in dist.files or ():
            path = site / str(f)
            if not str(f).startswith("..") and path.is_file():
                path.unlink()
        info = getattr(dist, "_path", None)
        if info is not None:
            shutil.rmtree(str(info), ignore_errors=True)


def _read_only(root: Path) -> None:
    for path in sorted(root.rglob("*"), reverse=True):  # files before their folders
        with contextlib.suppress(OSError):
            path.chmod(_RO_FILE if path.is_file() else _RO_DIR)
    root.chmod(_RO_DIR)


def build_env(
    lock: Lock,
    paths: EnvPaths,
    *,
    ttl: float = 30.0,
    wait_s: float = 3600.0,
    image: dict[str, str] | None = None,
    python_version: str | None = None,
) -> BuildResult:
    """The environment of ``lock`` on the store, built by exactly one caller (the others wait)."""
    started = time.monotonic()
    record_path = paths.record(lock.hash)
    done = read_record(record_path)
    if done is not None:
        return BuildResult(done, built=False, seconds=time.monotonic() - started)
    make_dir(paths.envs, PUBLIC)
    lease = Lease(paths.lease(f"env.{lock.hash}"), ttl=ttl)
    while not lease.try_acquire():
        done = read_record(record_path)
        if done is not None:
            return BuildResult(done, built=False, seconds=time.monotonic() - started)
        if time.monotonic() - started > wait_s:
            holder = lease.holder()
            raise LockTimeoutError(
                f"environment {lock.hash[:12]} is still being built by {holder.host if holder else '?'}",
                hint="wait for that build and launch again, or `starverse env ls` to see it",
            )
        time.sleep(0.2)
    try:
        with lease.renewing():
            done = read_record(record_path)
            if done is not None:
                return BuildResult(done, built=False, seconds=time.monotonic() - started)
            made = 0
            if lock.kind == "notebook":
                for dist in lock.dists:
                    if find_wheel(paths.wheels, dist) is None and make_wheel(dist, paths.wheels) is not None:
                        made += 1
            tmp = Path(tempfile.mkdtemp(dir=paths.envs, prefix=f".{lock.hash[:12]}."))
            try:
                _pip(lock, tmp / "site", paths.wheels, python_version=python_version)
                if lock.kind == "file" and image:
                    _prune(tmp / "site", image)
                (tmp / "site").mkdir(exist_ok=True)
                packages = sorted(
                    f"{d.metadata['Name']}=={d.version}" for d in md.distributions(path=[str(tmp / "site")])
                )
                record = EnvRecord(lock.hash, lock.to_json(), tuple(packages), tree_size(tmp),
                                   round(time.monotonic() - started, 3), time.time(), os.getuid())  # fmt: skip
                write_atomic(tmp / "env.json", json.dumps(record.to_json(), indent=2).encode(), 0o444)
                _read_only(tmp)
                if not lease.renew():
                    raise StoreError(f"lost the build lease of environment {lock.hash[:12]}",
                                     hint="launch again: another process took the build over")  # fmt: skip
                try:
                    tmp.rename(paths.env(lock.hash))
                except OSError:
                    if read_record(record_path) is None:
                        raise
                    # another user's build of the same hash was renamed first: use theirs, drop ours
                    _remove_tree(tmp)
                    return BuildResult(read_record(record_path) or record, built=False,
                                       seconds=time.monotonic() - started)  # fmt: skip
            except BaseException:
                _remove_tree(tmp)
                raise
            return BuildResult(record, built=True, seconds=time.monotonic() - started, wheels_made=made)
    finally:
        lease.release()


def _remove_tree(root: Path) -> None:
    if not root.exists():
        return
    for path in [root, *root.rglob("*")]:
        if path.is_dir() and not path.is_symlink():
            with contextlib.suppress(OSError):
                path.chmod(_RW_DIR)
    shutil.rmtree(root, ignore_errors=True)


def remove_env(paths: EnvPaths, env_id: str) -> None:
    """Remove one environment (made writable first: published trees are read-only)."""
    folder = paths.env(env_id)
    if folder.is_symlink():
        folder.unlink()
        return
    trash = folder.with_name(f".{env_id[:12]}.{uuid.uuid4().hex}.rm")
    folder.rename(trash)  # gone at once for readers, even if the removal takes long
    _remove_tree(trash)
