"""Hash Hugging Face blobs while huggingface_hub writes them.

huggingface_hub writes each LFS file to ``blobs/SHA256[.RANDOM].incomplete`` and renames it to
``blobs/SHA256`` when done. Reading the growing file as it is written lets verification
skip a second full read. A digest counts only for the very inode that became the final
blob, with exactly the expected size; anything else (a restarted download, a blob that
was already there) falls back to hashing the final file.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Any

__all__ = ["BlobFollower"]

_READ = 8 * 1024 * 1024


class BlobFollower:
    """Follow ``blobs/SHA.incomplete`` files of the expected LFS blobs and hash them.

    Parameters
    ----------
    blobs
        The repo's ``blobs`` folder in the HF cache.
    expected
        ``{sha256: size}`` of the LFS files being downloaded.
    """

    def __init__(self, blobs: Path, expected: dict[str, int]) -> None:
        self.blobs = blobs
        self.expected = {sha: size for sha, size in expected.items() if not (blobs / sha).exists()}
        self._done: dict[str, tuple[str, Any]] = {}  # sha -> (hexdigest, the still open file)
        self._open: dict[str, tuple[Any, Any, int]] = {}  # sha -> (file, hasher, bytes read)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="starverse-hf-hash", daemon=True)

    def __enter__(self) -> BlobFollower:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if exc[0] is None:
            while self._step():  # the download is over: read what is left
                pass

    def close(self) -> None:
        """Close every file (hashed files stay open until then, so their inodes are not reused)."""
        for f, _h, _n in self._open.values():
            f.close()
        for _d, f in self._done.values():
            f.close()
        self._open.clear()
        self._done.clear()

    def _step(self) -> bool:
        progressed = False
        for sha, size in self.expected.items():
            if sha in self._done:
                continue
            if sha not in self._open:
                f = self._open_incomplete(sha)
                if f is None:
                    continue
                self._open[sha] = (f, hashlib.sha256(), 0)
            f, h, n = self._open[sha]
            chunk = f.read(min(_READ, size - n)) if n < size else b""
            if chunk:
                h.update(chunk)
                n += len(chunk)
                self._open[sha] = (f, h, n)
                progressed = True
            if n == size:
                self._done[sha] = (h.hexdigest(), f)
                del self._open[sha]
                progressed = True
        return progressed

    def _open_incomplete(self, sha: str) -> Any:
        # huggingface_hub writes SHA.incomplete or SHA.RANDOM.incomplete; take the newest.
        candidates = []
        for p in self.blobs.glob(f"{sha}*.incomplete"):
            try:
                candidates.append((p.stat().st_mtime, p))
            except FileNotFoundError:
                continue
        for _mtime, p in sorted(candidates, reverse=True):
            try:
                return open(p, "rb")
            except FileNotFoundError:
                continue
        return None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                progressed = self._step()
            except OSError:
                progressed = False
            if not progressed:
                self._stop.wait(0.02)

    def digest(self, sha: str, final: Path) -> str | None:
        """The digest hashed during the download if ``final`` is that same file, else None."""
        got = self._done.get(sha)
        if got is None:
            return None
        try:
            st = final.stat()
        except FileNotFoundError:
            return None
        hashed = os.fstat(got[1].fileno())
        same = hashed.st_nlink > 0 and (hashed.st_ino, hashed.st_dev) == (st.st_ino, st.st_dev)
        return got[0] if same and st.st_size == self.expected[sha] else None
