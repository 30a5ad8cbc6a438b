"""Provenance of checkpoints: the run's secret, the signed record, and the checks on what is opened.

A checkpoint is trusted only when the run's record ``<run>/checkpoints/index.json`` lists it
with an HMAC-SHA256 that the run's secret ``<run>/.secret`` reproduces, and when the secret,
the checkpoint folder and every file in it belong to the uid that wrote the secret, are not
symbolic links, are writable by nobody else and are exactly the recorded files and sizes
(see ``_checkpoints`` for the whole rule). This module owns that rule: reading and creating
the secret, signing and verifying record entries, and opening folders and files by fd with
``O_NOFOLLOW`` so that what was checked is what is read. ``_checkpoints`` scans, lists,
records and prunes checkpoints with it; nothing here decides which checkpoint to resume.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import stat
import tempfile
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_starverse._volume import in_group
from jupyter_starverse.errors import PermissionDeniedError

__all__ = [
    "CHECKPOINT_INDEX",
    "DIR_FLAGS",
    "FILE_FLAGS",
    "METADATA",
    "RUN_SECRET",
    "STEP_DIR",
    "Record",
    "Root",
    "Untrusted",
    "record_binding",
    "file_modes",
    "open_root",
    "open_step",
    "read_records",
    "run_secret",
    "sha256_of",
]

CHECKPOINT_INDEX = "index.json"
"""The run's own record of the checkpoints it wrote, inside its ``checkpoints`` folder."""

RUN_SECRET = ".secret"  # noqa: S105 (a file name, not a password)
"""The run's private key for the HMAC of its checkpoint records, in the run folder."""

_MAX_INDEX_BYTES = 16 << 20
STEP_DIR = re.compile(r"^step-(\d{8,})$")
_SECRET_TEXT = re.compile(r"^[0-9a-f]{64}$")
METADATA = ".metadata"  # the DCP metadata: a pickle, unpickled by every load
_SHARED_WRITE = stat.S_IWGRP | stat.S_IWOTH
DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
FILE_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class Untrusted(Exception):
    """Why a folder, a file or a record fails the checks."""


@dataclass(frozen=True)
class Record:
    name: str
    step: int
    world_size: int
    time: float
    job_id: str | None
    metadata_sha256: str
    files: tuple[tuple[str, int], ...]
    healthy: bool = True
    problem: str | None = None

    def body(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "step": self.step,
            "world_size": self.world_size,
            "time": self.time,
            "job_id": self.job_id,
            "metadata_sha256": self.metadata_sha256,
            "files": {name: size for name, size in self.files},
            "healthy": self.healthy,
            "problem": self.problem,
        }

    def signed(self, key: bytes, binding: str) -> dict[str, Any]:
        return {**self.body(), "hmac": _mac(key, binding, self.body())}

    @classmethod
    def from_json(cls, data: Any) -> Record:
        """The record of one index entry; ``Untrusted`` when it is not one."""
        try:
            name = str(data["name"])
            job_id = data.get("job_id")
            files = data["files"]
            problem = data.get("problem")
            rec = cls(
                name,
                int(data["step"]),
                int(data["world_size"]),
                float(data["time"]),
                str(job_id) if job_id is not None else None,
                str(data["metadata_sha256"]),
                tuple(sorted((str(k), int(v)) for k, v in files.items())),
                bool(data["healthy"]),
                str(problem) if problem is not None else None,
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            raise Untrusted(
                f"its entry in {CHECKPOINT_INDEX} is incomplete (written before records were signed?)"
            ) from None
        if not STEP_DIR.match(name):
            raise Untrusted(f"its entry in {CHECKPOINT_INDEX} names no checkpoint folder")
        return rec


def _mac(key: bytes, binding: str, body: dict[str, Any]) -> str:
    message = json.dumps({"bind": binding, **body}, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hmac.new(key, message.encode(), hashlib.sha256).hexdigest()


def record_binding(root: Path) -> str:
    """What an HMAC binds a record to: the experiment and run names of the ``checkpoints`` folder ``root``."""
    run = Path(root).absolute().parent
    return f"{run.parent.parent.name}/{run.name}"


def _verified(entry: Any, key: bytes, binding: str) -> Record:
    """The record of ``entry`` when its HMAC is the one ``key`` gives; ``Untrusted`` saying why not."""
    rec = Record.from_json(entry)
    given = entry.get("hmac") if isinstance(entry, dict) else None
    if not isinstance(given, str) or not given:
        raise Untrusted(f"its entry in {CHECKPOINT_INDEX} has no HMAC (not written by a run of this version)")
    if not hmac.compare_digest(given, _mac(key, binding, rec.body())):
        raise Untrusted(
            f"its entry in {CHECKPOINT_INDEX} does not match its run's HMAC "
            "(edited after writing, or copied from another run or experiment)"
        )
    return rec


# ------------------------------------------------------------------------------ modes and owners
def _group_mode(run_info: os.stat_result) -> bool:
    """A group-shared run folder: setgid, or open to its group and closed to others."""
    mode = run_info.st_mode
    return bool(mode & stat.S_ISGID) or (mode & 0o050 == 0o050 and not mode & 0o005)


def file_modes(run_info: os.stat_result) -> tuple[int, int]:
    """(folder, file) modes of a checkpoint: never more open than the run folder, never writable by others."""
    if _group_mode(run_info):
        return 0o2750, 0o640
    if run_info.st_mode & 0o005 == 0o005:
        return 0o755, 0o644
    return 0o700, 0o600


def _check(info: os.stat_result, what: str, *, folder: bool, owner: int | None = None) -> None:
    """``what`` is a real folder (file), belongs to ``owner`` (when given) and nobody else may write it."""
    if stat.S_ISLNK(info.st_mode):
        raise Untrusted(f"{what} is a symbolic link")
    if folder and not stat.S_ISDIR(info.st_mode):
        raise Untrusted(f"{what} is not a folder")
    if not folder and not stat.S_ISREG(info.st_mode):
        raise Untrusted(f"{what} is not a regular file")
    if owner is None:
        return
    if info.st_uid != owner:
        raise Untrusted(f"{what} belongs to uid {info.st_uid}, not to the uid that wrote its run (uid {owner})")
    if info.st_mode & _SHARED_WRITE:
        raise Untrusted(f"{what} is writable by group or others (mode {stat.S_IMODE(info.st_mode):o})")


def _open(
    name: str | Path, what: str, *, dir_fd: int | None = None, folder: bool, owner: int | None = None
) -> tuple[int, os.stat_result]:
    """Open without following a final symbolic link and check what was opened."""
    try:
        fd = os.open(name, DIR_FLAGS if folder else FILE_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as err:  # ELOOP: a symbolic link; ENOTDIR: not a folder; EACCES
        with suppress(OSError):
            _check(os.stat(name, dir_fd=dir_fd, follow_symlinks=False), what, folder=folder, owner=owner)
        raise Untrusted(f"{what} cannot be opened ({err.strerror})") from None
    try:
        info = os.fstat(fd)
        _check(info, what, folder=folder, owner=owner)
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def _read_all(fd: int, limit: int | None = None) -> bytes:
    chunks, size = [], 0
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
        size += len(chunk)
        if limit is not None and size > limit:
            raise Untrusted(f"the checkpoint record {CHECKPOINT_INDEX} is larger than {limit} bytes")
    return b"".join(chunks)


def sha256_of(fd: int) -> str:
    digest = hashlib.sha256()
    while chunk := os.read(fd, 1 << 20):
        digest.update(chunk)
    return digest.hexdigest()


# ------------------------------------------------------------------------------------- secrets
def _secret_problem(info: os.stat_result, run_info: os.stat_result) -> str | None:
    """Why the secret file ``info`` of the run folder ``run_info`` cannot vouch for it (None: it can)."""
    if not stat.S_ISREG(info.st_mode):
        return "its run's secret is not a regular file"
    mode = stat.S_IMODE(info.st_mode)
    group = _group_mode(run_info)
    if mode & (0o037 if group else 0o077):
        return f"its run's secret is open to others (mode {mode:o})"
    if info.st_uid == os.geteuid():
        return None
    if group and info.st_gid == run_info.st_gid and mode & stat.S_IRGRP and in_group(info.st_gid):
        return None  # a member of the run folder's group, sharing it with the group
    return f"its run's secret belongs to uid {info.st_uid}, not to this user (uid {os.geteuid()})"


def _read_secret(run_fd: int, run_info: os.stat_result) -> tuple[bytes, int]:
    """The run's key and the uid that wrote it (its checkpoints must belong to that uid)."""
    try:
        fd = os.open(RUN_SECRET, FILE_FLAGS, dir_fd=run_fd)
    except FileNotFoundError:
        raise Untrusted(f"its run has no secret ({RUN_SECRET}): its records cannot be verified") from None
    except PermissionError:
        raise Untrusted("its run's secret cannot be read by this user (another user's run)") from None
    except OSError as err:
        raise Untrusted(f"its run's secret cannot be opened safely ({err.strerror})") from None
    try:
        info = os.fstat(fd)
        problem = _secret_problem(info, run_info)
        if problem:
            raise Untrusted(problem)
        text = os.read(fd, 256).decode("ascii", "replace").strip()
    finally:
        os.close(fd)
    if not _SECRET_TEXT.match(text):
        raise Untrusted("its run's secret is not one this project writes")
    return bytes.fromhex(text), info.st_uid


def run_secret(run_dir: Path) -> bytes:
    """The checkpoint key of the run folder ``run_dir``, created by its first writer.

    Created ``O_EXCL`` (a temp file linked into place, so a reader never sees half of it) with
    mode 0600 (0640 in a group-shared run folder) whatever the umask. A secret another uid put
    in our run folder is replaced: only what this user wrote signs this run's checkpoints.
    """
    run_fd = os.open(run_dir, DIR_FLAGS)
    try:
        run_info = os.fstat(run_fd)
        mode = 0o640 if _group_mode(run_info) else 0o600
        for _ in range(5):
            with suppress(Untrusted):
                key, writer = _read_secret(run_fd, run_info)
                if writer == os.geteuid():
                    return key
            try:
                info = os.stat(RUN_SECRET, dir_fd=run_fd, follow_symlinks=False)
            except FileNotFoundError:
                info = None
            if info is not None:
                ours = info.st_uid == os.geteuid() and stat.S_ISREG(info.st_mode)
                if ours and info.st_size and stat.S_IMODE(info.st_mode) != mode:
                    os.chmod(RUN_SECRET, mode, dir_fd=run_fd)  # ours, with the mode of an older version
                    continue
                with suppress(OSError):  # planted by another uid, a link, empty or garbled: never ours
                    os.unlink(RUN_SECRET, dir_fd=run_fd)
            fd, tmp = tempfile.mkstemp(dir=run_dir, prefix=f"{RUN_SECRET}.", suffix=".tmp")
            try:
                os.fchmod(fd, mode)
                os.write(fd, (secrets.token_hex(32) + "\n").encode())
                os.fsync(fd)
                os.close(fd)
                with suppress(FileExistsError):  # another writer won: read theirs
                    os.link(Path(tmp).name, RUN_SECRET, src_dir_fd=run_fd, dst_dir_fd=run_fd, follow_symlinks=False)
            finally:
                with suppress(OSError):
                    os.unlink(Path(tmp).name, dir_fd=run_fd)
        raise PermissionDeniedError(
            f"cannot create the checkpoint secret of run {run_dir}",
            hint=f"remove {Path(run_dir) / RUN_SECRET} (it is not yours) and save again",
        )
    finally:
        os.close(run_fd)


# ------------------------------------------------------------------------------- reading a run
@dataclass
class Root:
    """An opened ``checkpoints`` folder: its fd, the writer's uid, its verified records, and refusals."""

    fd: int
    writer: int
    records: dict[str, Record]
    refused: dict[str, str]


def open_root(root: Path) -> Root:
    """Check the run of the ``checkpoints`` folder ``root`` and read its verified records."""
    run_fd, run_info = _open(root.parent, "the run folder", folder=True)
    try:
        key, writer = _read_secret(run_fd, run_info)
        root_fd, _ = _open(root.name, "the run's checkpoints folder", dir_fd=run_fd, folder=True)
    finally:
        os.close(run_fd)
    try:
        records, refused = read_records(root_fd, key, record_binding(root))
    except BaseException:
        os.close(root_fd)
        raise
    return Root(root_fd, writer, records, refused)


def _index_entries(root_fd: int) -> list[Any]:
    try:
        fd, _ = _open(CHECKPOINT_INDEX, f"the checkpoint record {CHECKPOINT_INDEX}", dir_fd=root_fd, folder=False)
    except FileNotFoundError:
        return []
    try:
        raw = _read_all(fd, _MAX_INDEX_BYTES)
    finally:
        os.close(fd)
    try:
        data = json.loads(raw)
    except ValueError:
        raise Untrusted(f"the checkpoint record {CHECKPOINT_INDEX} is not valid JSON") from None
    entries = data.get("checkpoints") if isinstance(data, dict) else None
    return entries if isinstance(entries, list) else []


def read_records(root_fd: int, key: bytes, binding: str) -> tuple[dict[str, Record], dict[str, str]]:
    """Records whose HMAC ``key`` reproduces (by folder name), and why the other named entries are refused."""
    records: dict[str, Record] = {}
    refused: dict[str, str] = {}
    for entry in _index_entries(root_fd):
        name = entry.get("name") if isinstance(entry, dict) else None
        try:
            rec = _verified(entry, key, binding)
        except Untrusted as err:
            if isinstance(name, str) and STEP_DIR.match(name):
                records.pop(name, None)
                refused[name] = str(err)
            continue
        refused.pop(rec.name, None)
        records.pop(rec.name, None)
        records[rec.name] = rec
    return records, refused


def open_step(root: Root, rec: Record) -> int:
    """Open and check the checkpoint folder ``rec.name``: the writer's files, as recorded."""
    fd, _ = _open(rec.name, "the checkpoint folder", dir_fd=root.fd, folder=True, owner=root.writer)
    try:
        try:
            meta_fd, _ = _open(METADATA, f"its {METADATA}", dir_fd=fd, folder=False, owner=root.writer)
        except FileNotFoundError:
            raise Untrusted(f"it has no {METADATA}") from None
        try:
            digest = sha256_of(meta_fd)
        finally:
            os.close(meta_fd)
        if not hmac.compare_digest(digest, rec.metadata_sha256):
            raise Untrusted(f"its {METADATA} is not the one the run recorded")
        recorded = dict(rec.files)
        present = set(os.listdir(fd))  # noqa: PTH208 (a folder fd: what was checked, not a path)
        extra = sorted(present - set(recorded))
        if extra:
            raise Untrusted(f"it holds a file its record does not list ({', '.join(extra)})")
        for name, size in sorted(recorded.items()):
            if name not in present:
                raise Untrusted(f"its file {name} is missing")
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            _check(info, f"its file {name}", folder=False, owner=root.writer)
            if info.st_size != size:
                raise Untrusted(f"its file {name} is {info.st_size} bytes, the run recorded {size}")
    except BaseException:
        os.close(fd)
        raise
    return fd
