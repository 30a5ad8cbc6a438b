"""Publishing an entry on the store: the folder a mount hands out, making it read-only and
writing its sealed manifest (files' and folders' stamps, the owner), making it writable again
before a repair, and the cheap check that nothing of a published entry changed hands
(:meth:`LayoutPublished.foreign`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import stat
from pathlib import Path

from jupyter_starverse._volume import Owner, inside

from ._manifest import Manifest
from ._names import DatasetRef, ModelRef, Ref
from ._perms import make_read_only, make_writable, translate_permissions
from ._records import LayoutRecords
from ._seal import stamp_files, stamp_folders

__all__ = ["LayoutPublished"]


class LayoutPublished(LayoutRecords):
    """Publication of entries under one store root."""

    def mount_dir(self, ref: Ref, manifest: Manifest) -> Path:
        """The folder a job reads: the data folder, or the model's snapshot at the manifest's commit."""
        if isinstance(ref, DatasetRef):
            return self.data_dir(ref)
        return self.snapshot_dir(ref, str(manifest.commit))

    def foreign(self, ref: Ref, manifest: Manifest | None) -> list[str]:
        """What of a published entry is not its owner's (a few ``lstat`` calls, no file read).

        The manifest file, the owner it records (when ``manifest`` is given), and the folders a
        mount hands out must all belong to the entry's owner (or root): anything else means
        someone swapped them. A model's snapshot folder needs ``manifest`` (its commit).
        """
        owner = self.entry_owner(ref)
        trusted = (owner.uid, 0)
        out = []
        if manifest is not None and manifest.owner is not None and manifest.owner.uid != owner.uid:
            out.append(f"manifest (records {manifest.owner.name}, uid {manifest.owner.uid})")
        checks = [("manifest", self.manifest_path(ref))]
        if isinstance(ref, DatasetRef):
            top = self.data_dir(ref)
            checks += [(f"data/{ref.name}", top.parent), (f"data/{ref.name}/{ref.version}", top)]
        elif manifest is not None:
            checks += [("snapshot", self.mount_dir(ref, manifest))]
        for label, path in checks:
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(st.st_mode):
                out.append(f"{label} (a link)")
            elif st.st_uid not in trusted:
                out.append(f"{label} (owned by {Owner.of_uid(st.st_uid)}, not {owner})")
        return out

    @translate_permissions("publish a store entry")
    def publish(self, ref: Ref, manifest: Manifest) -> None:
        """Make the entry read-only for everyone (files 0444, folders 0555), then write its manifest
        (recording the entry's owner, checked by ``verify`` and ``mount``, and the stamps of its
        files and folders as they are now, read-only: :meth:`seal`)."""
        top = self.mount_dir(ref, manifest)
        inside(self.root, top)
        make_read_only(top)
        if isinstance(ref, ModelRef):
            hub = self.hf_cache.resolve()
            blobs = f"{hub}/{ref.folder}/blobs"
            for f in manifest.files:  # the blobs behind the snapshot's links
                with contextlib.suppress(OSError):
                    if f.etag and "/" not in f.etag and not f.etag.startswith("."):
                        # huggingface_hub names a blob by the file's ETag: one stat, no path resolution
                        blob = f"{blobs}/{f.etag}"
                        st = os.stat(blob, follow_symlinks=False)  # noqa: PTH116 (no Path per file)
                        if stat.S_ISREG(st.st_mode):
                            if stat.S_IMODE(st.st_mode) != 0o444:
                                os.chmod(blob, 0o444)  # noqa: PTH101 (no Path object per file)
                            continue
                    real = (top / f.path).resolve()
                    if real.is_relative_to(hub) and real.is_file() and stat.S_IMODE(real.stat().st_mode) != 0o444:
                        real.chmod(0o444)
        with contextlib.suppress(OSError):
            self.verify_path(self.key(ref)).unlink(missing_ok=True)
        self.write_manifest(ref, self.seal(ref, dataclasses.replace(manifest, owner=self.entry_owner(ref))))

    def seal(self, ref: Ref, manifest: Manifest) -> Manifest:
        """``manifest`` with every file's size, mtime and ctime as they are now (one stat each), and for
        a dataset its folders' (a model's snapshot folder is shared by revisions: files only)."""
        top = self.mount_dir(ref, manifest)
        folders = stamp_folders(top) if isinstance(ref, DatasetRef) else None
        return dataclasses.replace(manifest, files=stamp_files(top, manifest.files), folders=folders)

    def unpublish(self, ref: Ref, manifest: Manifest | None) -> None:
        """Folders of an entry writable again by their owner (before a repair); no-op for what is not ours."""
        if isinstance(ref, DatasetRef):
            inside(self.root, self.data_dir(ref))
            make_writable(self.data_dir(ref))
        elif manifest is not None and manifest.commit:
            inside(self.root, self.snapshot_dir(ref, manifest.commit))
            make_writable(self.snapshot_dir(ref, manifest.commit))
