"""Where everything lives on the store. The catalog is these files, not a process.

::

    STORE/
      catalog/datasets/NAME/VERSION.json            entry record (written by add)
      catalog/datasets/NAME/VERSION.manifest.json   complete + verified (written last by pull):
                                                    size, sha256, mtime and ctime of every file
      catalog/models/models--ORG--REPO/REV.json          entry record (written when a pull starts)
      catalog/models/models--ORG--REPO/REV.manifest.json commit + verified files
      data/NAME/VERSION/...                         dataset files (read-only, mount path)
      hf/hub/                                       HF_HUB_CACHE (huggingface_hub layout)
      .leases/u<uid>/  .progress/  .usage/          single-flight (one folder per user), live progress, last use

Every entry has an owner: the uid of its record file (``lstat``, never what the record says).
Only the owner, root or an admin changes it (:func:`jupyter_starverse._volume.may_act`);
a name belongs to whoever made ``catalog/datasets/NAME/``. Nothing here follows a link out
of the store: records are read with ``openat(O_NOFOLLOW)`` (:func:`_volume.open_under`) and
removed with :func:`_volume.remove_under`.

:class:`Layout` is built in layers, each module owning one: :mod:`._paths` (the store root
and every path), :mod:`._records` (owners, entry records, manifests, versions, the listing),
:mod:`._published` (publication) and this module (usage stamps and removal); the manifest
itself is :mod:`._manifest`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import time
from pathlib import Path

from jupyter_starverse._volume import inside, open_under, remove_under
from jupyter_starverse.errors import PermissionDeniedError

from ._manifest import Manifest
from ._names import DatasetRef, Ref
from ._paths import store_root
from ._perms import file_mode, make_dirs
from ._published import LayoutPublished

__all__ = ["Layout", "Manifest", "store_root"]

log = logging.getLogger(__name__)


class Layout(LayoutPublished):
    """Paths and small records under one store root."""

    # -- usage and removal -----------------------------------------------------

    def touch(self, key: str) -> None:
        """Record a use; at most one write a minute per entry (a stat is cheaper on NFS).

        The stamp is never followed: a link planted in its place is left alone (the use is not
        recorded). A stamp of another user's is bumped when the group may write it (``0660``
        in group mode), else the use is simply not recorded; a usage stamp never blocks a mount.
        """
        path = self.usage_path(key)
        try:
            inside(self.root, path)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                make_dirs(path.parent)
                with contextlib.suppress(FileExistsError):
                    fd = open_under(self.root, path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    try:
                        os.fchmod(fd, file_mode(path.parent, group_writable=True))
                    finally:
                        os.close(fd)
                return
            if not stat.S_ISREG(st.st_mode):
                log.warning("not recording the use of %s: %s is not a plain file", key, path)
                return
            if time.time() - st.st_mtime < 60:
                return
            os.utime(path, follow_symlinks=False)
        except (PermissionError, PermissionDeniedError) as e:
            log.debug("cannot record the use of %s: %s", key, e)

    def last_used(self, key: str) -> float | None:
        try:
            return os.lstat(self.usage_path(key)).st_mtime
        except FileNotFoundError:
            return None

    def data_paths(self, ref: Ref, manifest: Manifest | None) -> list[Path]:
        """The folders :meth:`remove_data` deletes, each checked: no link at any level below the root."""
        if isinstance(ref, DatasetRef):
            data = self.data_dir(ref)
            paths = [data, data.with_name(f".{data.name}.staging")]  # staging: left by a batch pull that crashed
        else:
            paths = [self.hf_cache / ref.folder / "blobs"]
            if manifest is not None and manifest.commit:
                paths.append(self.snapshot_dir(ref, manifest.commit))
        for p in paths:
            inside(self.root, p)
        return paths

    def remove_data(self, ref: Ref, manifest: Manifest | None) -> None:
        """Drop an entry's bytes; the manifest goes first so nobody sees it as cached.

        Nothing is followed: a link in place of a folder is refused (:func:`_volume.inside`),
        a link met inside is unlinked, never its target."""
        paths = self.data_paths(ref, manifest)
        self.remove(self.manifest_path(ref))
        if isinstance(ref, DatasetRef):
            for p in paths:
                remove_under(self.root, p)
            return
        blobs = paths[0]
        for p in paths[1:]:
            remove_under(self.root, p)
        snapshots = self.hf_cache / ref.folder / "snapshots"
        inside(self.root, snapshots)
        used = set()
        for dirpath, _dirs, names in os.walk(snapshots):
            for n in names:
                link = Path(dirpath) / n
                if link.is_symlink():
                    used.add(link.readlink().name)
        if blobs.is_dir() and not blobs.is_symlink():
            for blob in blobs.iterdir():
                if blob.name not in used:
                    remove_under(self.root, blob)

    def remove(self, path: Path) -> None:
        """Delete ``path`` below the root: a file, or a link itself (never its target), or a folder
        (:func:`_volume.remove_under`); a link among the folders above it is refused."""
        inside(self.root, path.parent)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            remove_under(self.root, path)
        else:
            path.unlink(missing_ok=True)

    def remove_record(self, ref: Ref) -> None:
        """The record, then the entry's stamps; a stamp of another user's (sticky folder) stays."""
        self.remove(self.record_path(ref))
        for p in (self.usage_path(self.key(ref)), self.progress_path(self.key(ref)), self.verify_path(self.key(ref))):
            try:
                self.remove(p)
            except (PermissionError, PermissionDeniedError) as e:
                log.debug("leaving %s: %s", p, e)


def dir_bytes(path: Path) -> tuple[int, int]:
    """(bytes, files) under ``path`` without following links; (0, 0) when absent."""
    total = count = 0
    if not path.is_dir() or path.is_symlink():  # a link in place of an entry's folder is not counted
        return 0, 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            try:
                st = os.lstat(f"{dirpath}/{f}")
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
                count += 1
    return total, count
