"""Which sources a server may read: the store, the server's root, and remote storage.

A Jupyter server reads files as its own user for whoever holds its token; what a REST body names
as a source (a dataset to add, a folder a data step reads) must therefore lie under the server's
root dir (``Settings.source_roots``) or in the store, or be remote storage that names no local
file. The CLI and the kernel set no roots: there the user reads what their own account may.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from jupyter_starverse.errors import BadInputError

__all__ = ["REMOTE_SCHEMES", "check_source"]

_LOCAL_SCHEMES = ("file", "local")
#: URL schemes a server may read while source roots are set: storage of no local folder.
REMOTE_SCHEMES = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "hf", "memory", "http", "https", "hdfs")


def check_source(source: str, roots: Sequence[Path | str], store: Path | str) -> str:
    """``source`` as it is read: a local path resolved and checked to lie in a root or the store.

    With no ``roots`` the source is returned as it is. A relative path is read from the first
    root; ``/``, ``./..//..``, ``zip://`` and chained URLs (``simplecache::...``), which read
    local files, are refused with a :class:`BadInputError` before anything is listed.
    """
    resolved = tuple(Path(r).expanduser().resolve() for r in roots)
    if not resolved:
        return source
    scheme = source.split("://", 1)[0].lower() if "://" in source else ""
    if scheme in REMOTE_SCHEMES and "::" not in source:
        return source  # object storage, memory: nothing of this machine's file system
    if (scheme and scheme not in _LOCAL_SCHEMES) or "::" in source:
        raise BadInputError(
            f"source {source!r} is not read on this server",
            field="source",
            hint=f"name a store dataset, a folder under {resolved[0]} or a URL of {', '.join(REMOTE_SCHEMES[:4])}...",
        )
    local = source.split("://", 1)[1] if scheme else source
    path = Path(local).expanduser()
    path = (path if path.is_absolute() else resolved[0] / path).resolve()
    allowed = (*resolved, Path(store).resolve())
    if not any(path == root or root in path.parents for root in allowed):
        raise BadInputError(
            f"source {source!r} is outside the server's root and the store",
            field="source",
            hint=f"name a store dataset, or a folder under {resolved[0]}",
        )
    return str(path)
