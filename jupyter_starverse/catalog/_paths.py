"""Where each thing of an entry lives under the store root: the store as a local folder
(:func:`store_root`, object-store URLs refused) and :class:`StorePaths`, the pure path
arithmetic of the layout (keys, leases, progress, usage and verify stamps, holds, records,
manifests, data and snapshot folders). Nothing here reads or writes the store.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from jupyter_starverse.errors import BadInputError

from ._names import DatasetRef, ModelRef, Ref

__all__ = ["StorePaths", "store_root"]

_WHY = "the store must be a local or network-mounted folder"
_HINT = (
    "mount the bucket or volume (NFS, CSI, FUSE) and point STARVERSE_STORE at its path; "
    "object-store URLs are fine as dataset sources"
)


def store_root(store: str, *, why: str = _WHY, field: str = "STARVERSE_STORE", hint: str = _HINT) -> Path:
    """The store as a local folder; object-store URLs are refused with a hint.

    ``why``, ``field`` and ``hint`` word the refusal for a caller that needs the folder for its
    own reason (job environments: :func:`jupyter_starverse.envs._layout.store_path`).
    """
    if store.startswith("file://"):
        store = store[len("file://") :]
    elif "://" in store or store.startswith("memory:"):
        raise BadInputError(f"STARVERSE_STORE={store!r}: {why}", field=field, hint=hint)
    return Path(store).expanduser().absolute()


class StorePaths:
    """The paths of the layout under one store root (see :mod:`._layout`)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.hf_cache = root / "hf" / "hub"

    # -- keys ------------------------------------------------------------------

    @staticmethod
    def key(ref: Ref) -> str:
        if isinstance(ref, DatasetRef):
            return f"ds.{ref.name}@{ref.version}"
        return f"{StorePaths._hf_prefix(ref)}.{ref.org}--{ref.repo}@{ref.revision_key}"

    @staticmethod
    def _hf_prefix(ref: ModelRef) -> str:
        return "hf" if ref.repo_type == "model" else "hfds"

    @staticmethod
    def lease_key(ref: Ref) -> str:
        # One lease per HF repo: its revisions share blobs.
        return (
            StorePaths.key(ref)
            if isinstance(ref, DatasetRef)
            else f"{StorePaths._hf_prefix(ref)}.{ref.org}--{ref.repo}"
        )

    def lease_path(self, key: str) -> Path:
        """The single-flight lease of ``key``, in this user's own lease folder.

        Only an entry's owner pulls it, so its leases live in ``.leases/u<uid>/``, a folder only
        that uid writes (``.leases`` itself is sticky and group-writable): another member cannot
        plant a lease that the owner, in a sticky folder, could never remove.
        """
        return self.root / ".leases" / f"u{os.geteuid()}" / f"{key}.lease"

    def file_lease_path(self, key: str, rel: str) -> Path:
        digest = hashlib.sha1(rel.encode(), usedforsecurity=False).hexdigest()[:20]
        return self.root / ".leases" / f"u{os.geteuid()}" / f"{key}.{digest}.lease"

    def progress_path(self, key: str) -> Path:
        return self.root / ".progress" / f"{key}.json"

    def usage_path(self, key: str) -> Path:
        return self.root / ".usage" / key

    def holds_dir(self, key: str) -> Path:
        return self.root / ".holds" / key

    def verify_path(self, key: str) -> Path:
        return self.root / ".verify" / f"{key}.json"

    # -- entries ---------------------------------------------------------------

    def dataset_folder(self, name: str) -> Path:
        return self.root / "catalog" / "datasets" / name

    def record_path(self, ref: Ref) -> Path:
        if isinstance(ref, DatasetRef):
            return self.dataset_folder(ref.name) / f"{ref.version}.json"
        return self.root / "catalog" / "models" / ref.folder / f"{ref.revision_key}.json"

    def manifest_path(self, ref: Ref) -> Path:
        return self.record_path(ref).with_suffix(".manifest.json")

    def data_dir(self, ref: DatasetRef) -> Path:
        return self.root / "data" / ref.name / str(ref.version)

    def snapshot_dir(self, ref: ModelRef, commit: str) -> Path:
        return self.hf_cache / ref.folder / "snapshots" / commit

    def name_folder(self, ref: Ref) -> Path:
        """The folder of a name's records: whoever made it owns the name."""
        return self.record_path(ref).parent
