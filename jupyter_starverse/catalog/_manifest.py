"""The manifest of an entry: the record, written last by a pull, that proves the entry complete
and verified (every file with its size, hash and stamps, a dataset's folders, the commit of a
model, the owner at publication), with its strict parser (the store is shared: untrusted).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from jupyter_starverse._volume import Owner

from ._seal import FolderStamp
from ._types import FileRecord

__all__ = ["Manifest"]

_COMMIT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@dataclass(frozen=True)
class Manifest:
    """Proof that an entry is complete: every file with its verified size and hash.

    Since publication also stamps (``_seal``): every file's mtime and ctime, and for a dataset
    its ``folders`` (None in older manifests: those are checked by size only).
    """

    ref: str
    files: tuple[FileRecord, ...]
    completed_at: float
    commit: str | None = None
    owner: Owner | None = None  # the entry's owner when it was published (checked by verify and mount)
    folders: tuple[FolderStamp, ...] | None = None

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self) -> dict[str, Any]:
        return {
            "ref": self.ref,
            "commit": self.commit,
            "completed_at": self.completed_at,
            "owner": self.owner.to_json() if self.owner is not None else None,
            "files": [f.to_json() for f in self.files],
            **({"folders": [d.to_json() for d in self.folders]} if self.folders is not None else {}),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Manifest:
        """Parse a manifest; ``ValueError`` for anything malformed (the store is shared: untrusted)."""
        if not isinstance(data, dict) or not isinstance(data.get("files"), list):
            raise ValueError("not a manifest (no list of files)")
        files = []
        for f in data["files"]:  # tens of thousands per manifest, read by every mount: no helper per field
            if type(f) is not dict:
                raise ValueError(f"bad file record {f!r}")
            path, size, sha, etag = f.get("path"), f.get("size"), f.get("sha256"), f.get("etag")
            mtime, ctime = f.get("mtime_ns"), f.get("ctime_ns")
            if (
                type(path) is not str
                or type(size) is not int  # not a bool either
                or size < 0
                or (sha is not None and type(sha) is not str)
                or (etag is not None and type(etag) is not str)
                or (mtime is not None and (type(mtime) is not int or mtime < 0))
                or (ctime is not None and (type(ctime) is not int or ctime < 0))
            ):
                raise ValueError(f"bad file record {f!r}")
            files.append(FileRecord(path, size, sha, etag, mtime, ctime))
        folders = None
        if data.get("folders") is not None:
            if not isinstance(data["folders"], list):
                raise ValueError("bad folders")
            folders = []
            for d in data["folders"]:
                if not isinstance(d, dict) or not isinstance(d.get("path"), str):
                    raise ValueError(f"bad folder record {d!r}")
                if not (_is_int(d.get("mtime_ns")) and _is_int(d.get("ctime_ns"))):
                    raise ValueError(f"bad folder record {d!r}")
                folders.append(FolderStamp(d["path"], d["mtime_ns"], d["ctime_ns"]))
        commit = data.get("commit")
        if commit is not None and (not isinstance(commit, str) or not _COMMIT_RE.match(commit) or ".." in commit):
            raise ValueError(f"bad commit {commit!r}")
        completed = data.get("completed_at")
        if (
            not isinstance(data.get("ref"), str)
            or not isinstance(completed, int | float)
            or isinstance(completed, bool)
        ):
            raise ValueError("no ref or completion time")
        owner = data.get("owner")
        if owner is not None and not (isinstance(owner, dict) and _is_int(owner.get("uid"))):
            raise ValueError(f"bad owner {owner!r}")
        by = Owner(int(owner["uid"]), str(owner.get("name") or f"uid {owner['uid']}")) if owner else None
        stamps = tuple(folders) if folders is not None else None
        return cls(str(data["ref"]), tuple(files), float(completed), commit, by, stamps)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
