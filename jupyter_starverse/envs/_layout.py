"""Where job environments and working folders live on the store (the same path on every node and pod).

::

    STORE/
      envs/<lock hash>/env.json          the record (lock, packages, size, build time), written last
      envs/<lock hash>/site/             the packages, layered over the image's (PYTHONPATH)
      envs/wheels/                       wheels made once from the kernel's files or downloaded
      envs/images/<slug>.json            recorded package lists of container images
      workdirs/<sha256>.tar              a packed working folder, content-addressed
      workdirs/<sha256>/                 the same, unpacked read-only (local and Slurm ranks run in it)
      .leases/u<uid>/env.<hash>.lease    single-flight of a build per user (the catalog's NFS-safe lease)
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from jupyter_starverse.catalog._paths import store_root  # one copy of the store-as-a-folder rule
from jupyter_starverse.errors import BadInputError

__all__ = ["HASH_RE", "EnvPaths", "store_path"]

HASH_RE = re.compile(r"^[0-9a-f]{64}$")


def store_path(store: str) -> Path:
    """The store as a local folder (environments need a file system every node sees)."""
    return store_root(
        store,
        why="job environments need the store on a shared folder",
        field="env_from",
        hint="set STARVERSE_STORE to a network-mounted folder, or launch with --env-from image",
    )


class EnvPaths:
    """Paths of environments and working folders under one store root."""

    def __init__(self, store: str) -> None:
        self.store = store
        self.root = store_path(store)
        self.envs = self.root / "envs"
        self.wheels = self.envs / "wheels"
        self.images = self.envs / "images"
        self.workdirs = self.root / "workdirs"

    @staticmethod
    def check(value: str, what: str = "environment") -> str:
        if not HASH_RE.match(value):
            raise BadInputError(f"{value[:80]!r} is not an {what} hash", field="env_id",
                                hint="give the 64-hex hash `starverse env ls` shows")  # fmt: skip
        return value

    def env(self, env_id: str) -> Path:
        return self.envs / self.check(env_id)

    def site(self, env_id: str) -> Path:
        return self.env(env_id) / "site"

    def record(self, env_id: str) -> Path:
        return self.env(env_id) / "env.json"

    def lease(self, key: str) -> Path:
        """The build lease of ``key`` in this user's own lease folder (as the catalog's, ``.leases/u<uid>/``).

        ``.leases`` is sticky and group-writable on a shared store: a lease another member planted
        there could never be replaced. Builds of one user are single-flight; two users building the
        same hash at once both build, and the one atomic rename of the finished folder picks the winner.
        """
        return self.root / ".leases" / f"u{os.geteuid()}" / f"{key}.lease"

    def workdir_tar(self, workdir_id: str) -> Path:
        return self.workdirs / f"{self.check(workdir_id, 'working folder')}.tar"

    def workdir_tree(self, workdir_id: str) -> Path:
        return self.workdirs / self.check(workdir_id, "working folder")
