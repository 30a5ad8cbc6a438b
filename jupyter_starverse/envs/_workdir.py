"""The working folder of a job: packed once into the store, content-addressed, unpacked read-only.

Ignore rules are ``.gitignore``-style, read from the folder's ``.starverseignore`` (else its
``.gitignore``); version-control folders, caches and virtual environments are always left out,
and so are links (nothing outside the folder is ever packed). The tar is deterministic (sorted,
no owners or times), so the same files give the same hash on every machine and launch.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import io
import os
import shutil
import tarfile
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_starverse._volume import PUBLIC, make_dir
from jupyter_starverse.errors import BadInputError

from ._layout import EnvPaths

__all__ = ["WORKDIR_LIMIT", "Workdir", "pack_workdir", "publish_workdir"]

WORKDIR_LIMIT = 100 * 1024 * 1024
_RO_FILE, _RO_DIR, _RW_DIR = 0o444, 0o555, 0o755  # unpacked read-only for every rank
ALWAYS_IGNORED = (".git/", ".hg/", ".svn/", "__pycache__/", "*.pyc", ".ipynb_checkpoints/", ".venv/", "venv/",
                  "node_modules/", ".mypy_cache/", ".pytest_cache/", ".ruff_cache/", ".DS_Store")  # fmt: skip


@dataclass(frozen=True)
class Workdir:
    """A packed working folder: where it came from, its hash, files and size (and the tar, until published)."""

    source: str
    id: str
    files: int
    size: int
    biggest: tuple[tuple[str, int], ...] = ()
    data: bytes = b""

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "id": self.id, "files": self.files, "size": self.size,
                "biggest": [list(b) for b in self.biggest]}  # fmt: skip


def _rules(folder: Path) -> list[str]:
    for name in (".starverseignore", ".gitignore"):
        path = folder / name
        if path.is_file() and not path.is_symlink():
            with contextlib.suppress(OSError, UnicodeDecodeError):
                return [
                    line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")
                ]
    return []


def _matches(pattern: str, rel: str, is_dir: bool) -> bool:
    dir_only = pattern.endswith("/")
    pat = pattern.rstrip("/")
    if dir_only and not is_dir:
        return False
    if pat.startswith("/") or "/" in pat:
        return fnmatch.fnmatchcase(rel, pat.lstrip("/")) or fnmatch.fnmatchcase(rel, pat.lstrip("/").replace("**/", ""))
    return fnmatch.fnmatchcase(rel.rsplit("/", 1)[-1], pat)


def _ignored(rules: list[str], rel: str, is_dir: bool) -> bool:
    out = False
    for rule in rules:
        negate = rule.startswith("!")
        if _matches(rule[1:] if negate else rule, rel, is_dir):
            out = not negate
    return out


def pack_workdir(folder: str, *, limit: int = WORKDIR_LIMIT, exclude: tuple[Path, ...] = ()) -> Workdir:
    """Pack ``folder`` (in memory) and hash it; BadInputError naming the biggest files when over ``limit``."""
    root = Path(folder).expanduser().absolute()
    if not root.is_dir():
        raise BadInputError(f"--workdir {folder!r} is not a folder", field="workdir",
                            hint="give the folder the script reads its files from (default: its own)")  # fmt: skip
    rules = [*ALWAYS_IGNORED, *_rules(root)]
    skip = {p.absolute() for p in exclude}
    entries: list[tuple[str, Path, int]] = []
    for current, dirs, files in os.walk(root):
        here = Path(current)
        rel_here = here.relative_to(root).as_posix()
        keep = []
        for d in sorted(dirs):
            rel = d if rel_here == "." else f"{rel_here}/{d}"
            path = here / d
            if path.is_symlink() or path.absolute() in skip or _ignored(rules, rel, True):
                continue
            keep.append(d)
        dirs[:] = keep
        for name in sorted(files):
            rel = name if rel_here == "." else f"{rel_here}/{name}"
            path = here / name
            if path.is_symlink() or not path.is_file() or _ignored(rules, rel, False):
                continue
            entries.append((rel, path, path.stat().st_size))
    total = sum(size for _, _, size in entries)
    biggest = tuple(sorted(((rel, size) for rel, _, size in entries), key=lambda t: -t[1])[:5])
    if total > limit:
        listing = ", ".join(f"{rel} ({size / 2**20:.1f} MiB)" for rel, size in biggest)
        raise BadInputError(
            f"--workdir {root}: {total / 2**20:.1f} MiB is over the limit of {limit / 2**20:.0f} MiB; "
            f"biggest: {listing}",
            field="workdir",
            hint="list data and outputs in the folder's .starverseignore (or .gitignore), put datasets in the store "
            "(`starverse store add`), or give a smaller --workdir",
        )
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel, path, size in sorted(entries):
            info = tarfile.TarInfo(rel)
            info.size, info.mtime, info.mode = size, 0, 0o755 if os.access(path, os.X_OK) else 0o644
            with open(path, "rb") as f:
                tar.addfile(info, f)
    data = buf.getvalue()
    return Workdir(str(root), hashlib.sha256(data).hexdigest(), len(entries), total, biggest, data)


def publish_workdir(pack: Workdir, paths: EnvPaths) -> tuple[Path, bool]:
    """Write the tar and its read-only unpacked tree once (temp + rename); (tree, whether this call wrote it)."""
    tree = paths.workdir_tree(pack.id)
    if tree.is_dir():
        return tree, False
    make_dir(paths.workdirs, PUBLIC)
    tar_path = paths.workdir_tar(pack.id)
    if not tar_path.is_file():
        tmp = tar_path.with_name(f".{tar_path.name}.{uuid.uuid4().hex}.tmp")
        tmp.write_bytes(pack.data)
        tmp.chmod(_RO_FILE)
        tmp.replace(tar_path)
    staging = Path(tempfile.mkdtemp(dir=paths.workdirs, prefix=f".{pack.id[:12]}."))
    with tarfile.open(fileobj=io.BytesIO(pack.data)) as tar:
        for member in tar.getmembers():  # our own tar, but checked: files only, inside the folder
            if not member.isfile() or member.name.startswith("/") or ".." in member.name.split("/"):
                continue
            dest = staging / member.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            src = tar.extractfile(member)
            assert src is not None
            dest.write_bytes(src.read())
            dest.chmod(_RO_DIR if member.mode & 0o100 else _RO_FILE)
    _set_dirs(staging, _RO_DIR)
    try:
        staging.rename(tree)
    except OSError:
        if not tree.is_dir():
            raise
        _set_dirs(staging, _RW_DIR)
        shutil.rmtree(staging, ignore_errors=True)
        return tree, False
    return tree, True


def _set_dirs(root: Path, mode: int) -> None:
    for path in sorted((p for p in root.rglob("*") if p.is_dir()), reverse=True):
        path.chmod(mode)
    root.chmod(mode)
