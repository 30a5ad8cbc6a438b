"""Lazy reads of an object-store dataset through the store's shared cache.

fsspec's ``simplecache::``/``filecache::`` let several cold readers fill the same cache
file at once and hand back empty or truncated files. Here each file is filled by exactly
one process (per-file lease, see :mod:`._lease`), written to a part file, verified and
renamed; everyone else waits for the rename and then reads the complete local file. The
cache is the entry's own data folder, so what readers fetch also counts for ``pull``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from fsspec.spec import AbstractFileSystem

from jupyter_starverse.errors import BadInputError, NotFoundError

from ._fetch import SourceFile, list_source, open_source
from ._layout import Layout
from ._names import DatasetRef, parse_ref, safe_join

__all__ = ["CacheFiller", "SharedCacheFileSystem"]


class CacheFiller(Protocol):
    """What the filesystem asks of the store that owns the cache (the ``Catalog`` is one).

    A protocol rather than the catalog class itself, so that this module stays below the
    catalog: the catalog makes a filesystem over itself (``Catalog.fs``), the filesystem never
    imports the catalog.
    """

    layout: Layout

    def wait_for_batch(self, ref: DatasetRef, dest: Path) -> None: ...

    def ensure_file(self, key: str, fs: Any, src: SourceFile, dest: Path) -> Any: ...


class SharedCacheFileSystem(AbstractFileSystem):  # type: ignore[misc]
    """Read-only filesystem over one dataset entry; paths are relative to the entry.

    Parameters
    ----------
    catalog
        The catalog that owns the store.
    ref
        A resolved dataset ref (``name@version``).
    """

    protocol = "starverse-cache"
    cachable = False

    def __init__(self, *, catalog: CacheFiller, ref: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        parsed = parse_ref(ref)
        if not isinstance(parsed, DatasetRef) or parsed.version is None:
            raise BadInputError(f"{ref!r} is not a resolved dataset ref", field="ref")
        self.catalog = catalog
        self.ref = parsed
        self.entry = catalog.layout.read_entry(parsed)
        self.data_dir = catalog.layout.data_dir(parsed)
        self._source: tuple[Any, dict[str, SourceFile]] | None = None

    def _files(self) -> tuple[Any, dict[str, SourceFile]]:
        if self._source is None:
            fs, root = open_source(self.entry.source)
            self._source = (fs, {f.rel: f for f in list_source(fs, root, self.entry.source)})
        return self._source

    def _file(self, path: str) -> SourceFile:
        rel = self._strip_protocol(path).strip("/")
        safe_join(self.data_dir, rel)
        files = self._files()[1]
        if rel not in files:
            raise NotFoundError(
                f"{rel!r} is not a file of {self.ref}", hint="list the entry with catalog.fs(name).ls('')"
            )
        return files[rel]

    def ls(self, path: str = "", detail: bool = True, **kwargs: Any) -> list[Any]:
        prefix = self._strip_protocol(path).strip("/")
        out: dict[str, dict[str, Any]] = {}
        for rel, f in self._files()[1].items():
            if prefix and not rel.startswith(prefix + "/") and rel != prefix:
                continue
            rest = rel[len(prefix) :].lstrip("/") if prefix else rel
            head = rest.split("/", 1)[0]
            name = f"{prefix}/{head}" if prefix else head
            if "/" in rest:
                out[name] = {"name": name, "size": 0, "type": "directory"}
            else:
                out[name] = {"name": name, "size": f.size, "type": "file"}
        if not out:
            raise FileNotFoundError(path)
        return list(out.values()) if detail else sorted(out)

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        rel = self._strip_protocol(path).strip("/")
        files = self._files()[1]
        if rel in files:
            return {"name": rel, "size": files[rel].size, "type": "file"}
        return super().info(path, **kwargs)  # type: ignore[no-any-return]

    def local_path(self, path: str) -> str:
        """Fill the cache for ``path`` if needed and return the complete local file."""
        src = self._file(path)
        dest = safe_join(self.data_dir, src.rel)
        self.catalog.wait_for_batch(self.ref, dest)
        self.catalog.ensure_file(self.catalog.layout.key(self.ref), self._files()[0], src, dest)
        self.catalog.layout.touch(self.catalog.layout.key(self.ref))
        return str(dest)

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        if mode != "rb":
            raise BadInputError("catalog entries are read-only", field="mode", hint="open with mode 'rb'")
        return open(self.local_path(path), "rb")
