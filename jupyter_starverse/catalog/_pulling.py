"""Pulling into the store: single-flight, resumable, shared by every node and notebook.

:class:`Pulling` fills an entry once from its source while concurrent callers anywhere share
the download (one lease per entry, fenced publication): a dataset folder or fsspec URL as one
staged batch or file by file (large files split over connections, small ones made durable
together), a Hugging Face repo through :mod:`._models`, a local model folder by import; and
:meth:`~Pulling.ensure_file`, one writer per file for the lazy shared-cache filesystem. The
checks of a pull's options (connections, allow/ignore patterns) live here too, for REST to
run before it starts a pull in a thread.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from jupyter_starverse._volume import current_owner, may_act
from jupyter_starverse.errors import BadInputError, ConflictError, NotFoundError, PermissionDeniedError

from . import _download
from ._fetch import (
    LeaseLostError,
    SourceFile,
    check_space,
    fetch_file,
    is_local,
    list_source,
    open_source,
    remove_old_parts,
)
from ._layout import Manifest
from ._lease import Lease
from ._localbatch import copy_batch, staging_dir
from ._models import import_model_folder, pull_model, sha256_file, write_ref
from ._names import DatasetRef, ModelRef, Ref, parse_hf, parse_ref, safe_join
from ._perms import make_dirs, translate_permissions
from ._progress import ProgressCallback, ProgressTracker, read_progress, write_json_atomic
from ._types import Entry, EntryStatus, FileRecord
from ._verifying import Verifying

__all__ = ["Pulling", "check_connections", "check_pull_options", "run_parallel"]

_POLL = 0.1
_REMOTE_BATCH = 64  # small files of a first pull from a remote source fetched as one staged batch from here
log = logging.getLogger(__name__)


class Pulling(Verifying):
    """``pull``, ``import_model`` and the shared-cache fill (see the module)."""

    @translate_permissions("pull into the store")
    def pull(
        self,
        ref: str,
        *,
        progress: ProgressCallback | None = None,
        connections: int | None = None,
        allow: Sequence[str] | None = None,
        ignore: Sequence[str] | None = None,
    ) -> EntryStatus:
        """Fill the store from the source once; concurrent callers anywhere share one download.

        ``connections`` (default ``STARVERSE_PULL_CONNECTIONS``) is how many connections a
        large file's ranges may take (up to 4 such files at once; connections that add no speed
        close again), or how many small files come at once. ``allow``/``ignore`` are
        glob patterns choosing files of a Hugging Face repo (``hf:datasets/ORG/NAME`` or a
        model); pulling a cached repo with new patterns adds the files they select.
        """
        parsed = parse_ref(ref)
        n = check_connections(self.settings.pull_connections if connections is None else connections)
        patterns = _patterns(allow, "allow"), _patterns(ignore, "ignore")
        self._prepare()
        if isinstance(parsed, ModelRef):
            if self.layout.record_path(parsed).exists():
                self._repair(parsed)
            return self._pull_model(parsed, progress, n, patterns)
        if any(patterns):
            raise BadInputError(
                "allow/ignore patterns choose files of Hugging Face repos",
                field="allow",
                hint="register a subset of a dataset as its own entry: `starverse store add NAME SOURCE/SUBFOLDER`",
            )
        resolved = self.layout.resolve(parsed)
        assert isinstance(resolved, DatasetRef)
        entry = self.layout.read_entry(resolved)
        if self.layout.read_manifest(resolved) is None:  # only the owner fills an entry
            self._check_data_folder(resolved, self._check_owner(resolved, "pull"))
        self._repair(resolved)
        tracker = self._tracker(resolved, progress)
        self._single_flight(resolved, tracker, lambda lease: self._pull_dataset(resolved, entry, tracker, lease, n))
        return self._finish(resolved, tracker)

    @translate_permissions("pull into the store")
    def check_pull(self, ref: str) -> None:
        """PermissionDeniedError now when :meth:`pull` of ``ref`` would be refused for its owner
        (REST checks before it starts a pull in a thread); NotFoundError for an unknown dataset."""
        parsed = parse_ref(ref)
        if isinstance(parsed, ModelRef) and not self.layout.record_path(parsed).exists():
            owner = self.layout.name_owner(parsed)
            if owner is not None and not may_act(owner.uid, self._admin_gid):
                raise PermissionDeniedError(
                    f"{parsed.name} in this store belongs to {owner.name} (uid {owner.uid})",
                    hint=f"ask {owner.name} to pull it, or an admin (STARVERSE_ADMIN_GROUP)",
                )
            return
        resolved = self.layout.resolve(parsed)
        if self.layout.read_manifest(resolved) is None:
            self._check_owner(resolved, "pull")

    def _tracker(self, ref: Ref, progress: ProgressCallback | None) -> ProgressTracker:
        return ProgressTracker(str(ref), self.layout.progress_path(self.layout.key(ref)), progress)

    def _finish(self, ref: Ref, tracker: ProgressTracker) -> EntryStatus:
        self.layout.touch(self.layout.key(ref))
        manifest = self.layout.read_manifest(ref)
        if manifest is not None:
            tracker.bytes_total = tracker.bytes_done = manifest.size
            tracker.files_total = tracker.files_done = len(manifest.files)
        tracker.set_phase("done")
        return self._status(ref)

    def _single_flight(
        self,
        ref: Ref,
        tracker: ProgressTracker,
        work: Callable[[Lease], Manifest],
        needed: Callable[[], bool] | None = None,
    ) -> None:
        path = self.layout.lease_path(self.layout.lease_key(ref))
        progress_path = self.layout.progress_path(self.layout.key(ref))
        if needed is None:

            def needed() -> bool:
                return self.layout.read_manifest(ref) is None

        while needed():
            lease = Lease(path, ttl=self.settings.lock_ttl)
            if not lease.try_acquire():
                tracker.relay(read_progress(progress_path))
                time.sleep(_POLL)
                continue
            try:
                with lease.renewing():
                    if not needed():
                        return
                    manifest = work(lease)
                    if not lease.renew():  # fencing: only the holder publishes
                        raise LeaseLostError(str(ref))
                    self.layout.publish(ref, manifest)  # read-only (0555/0444), then the manifest
                return
            except LeaseLostError:
                tracker.owner = False
                continue
            except BaseException as e:
                tracker.owner = True  # we held the lease: publish the failure for other viewers
                tracker.set_phase("failed", error=str(e))
                raise
            finally:
                lease.release()

    def _pull_dataset(
        self, ref: DatasetRef, entry: Entry, tracker: ProgressTracker, lease: Lease, connections: int
    ) -> Manifest:
        fs, root = open_source(entry.source)
        files = list_source(fs, root, entry.source)
        data_dir = self.layout.data_dir(ref)
        self.layout.unpublish(ref, None)  # folders left read-only by an earlier publication
        make_dirs(data_dir)
        key = self.layout.key(ref)
        unsynced = self.layout.progress_path(key).with_suffix(".unsynced")
        self._distrust_unsynced(unsynced, data_dir, files)
        remove_old_parts(data_dir)
        first = not any(os.scandir(data_dir))
        batch = is_local(fs) and first  # a first pull of a folder
        done = set() if batch else {f.rel for f in files if self._present(safe_join(data_dir, f.rel), f)}
        present = sum(f.size or 0 for f in files if f.rel in done)
        total = sum(f.size or 0 for f in files)
        # what parts and a staged batch hold already counts as done (a re-pull after a full disk)
        check_space(data_dir, [f for f in files if f.rel not in done], staging=staging_dir(data_dir))
        tracker.start(bytes_total=total, files_total=len(files), already=present)
        if batch:  # one batch, staged, synced once and renamed into place (see _localbatch)
            copied = copy_batch(files, data_dir, lease=lease, tracker=tracker, workers=min(connections, 2))
            return Manifest(str(ref), tuple(copied[f.rel] for f in files), time.time())
        boot = _download.boot_id()

        def one(f: SourceFile, n: int, *, sync: bool = True) -> FileRecord:
            dest = safe_join(data_dir, f.rel)
            return self.ensure_file(key, fs, f, dest, tracker=tracker, parent=lease, connections=n, sync=sync)

        def one_small(f: SourceFile, n: int) -> FileRecord:
            return one(f, n, sync=boot is None)  # with a boot id: one syncfs for the batch, below

        # Large files up to 4 at once, each with the connections that help (each fsync'ed); small
        # files N at a time, made durable together: a marker names this boot until the batch
        # is synced, so a pull after an OS crash does not trust small files renamed before it.
        big = [f for f in files if f.size is not None and f.size >= _download.SPLIT_AT]
        small = [f for f in files if f.size is None or f.size < _download.SPLIT_AT]
        records: dict[str, FileRecord] = {}
        if first and len(small) >= _REMOTE_BATCH:
            # A first pull of many small files: one staged batch, no lease, part file or sync per
            # file (see _localbatch); the large files then come as below, each resumable.
            def fetch_small(f: SourceFile, dest: Path) -> FileRecord:
                return fetch_file(fs, f, dest, leases=(lease,), connections=1, sync=False)

            records = copy_batch(small, data_dir, lease=lease, tracker=tracker, workers=connections,
                                 copy_small=fetch_small)  # fmt: skip
            small = []
        at_once, per_file = _download.share_connections(connections, len(big))
        records.update(run_parallel(one, big, at_once, per_file=per_file))
        if small and boot is not None:
            write_json_atomic(unsynced, {"boot": boot})
        records.update(run_parallel(one_small, small, connections))
        if small and boot is not None:
            _download.sync_filesystem(data_dir)
            unsynced.unlink(missing_ok=True)
        return Manifest(str(ref), tuple(records[f.rel] for f in files), time.time())

    @staticmethod
    def _distrust_unsynced(marker: Path, data_dir: Path, files: list[SourceFile]) -> None:
        """Small files of a batch that was never synced, written before an OS crash, may be garbage.

        Within the same boot (a kill -9) the page cache still holds them: they are kept and
        synced with this pull's batch. After a reboot, or on another host, they are removed.
        """
        try:
            data = json.loads(marker.read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError):
            data = {}
        if not isinstance(data, dict) or data.get("boot") != _download.boot_id():
            log.warning("a pull of %s ended without syncing its small files: fetching them again", data_dir)
            for f in files:
                if f.size is None or f.size < _download.SPLIT_AT:
                    safe_join(data_dir, f.rel).unlink(missing_ok=True)
        marker.unlink(missing_ok=True)

    def wait_for_batch(self, ref: DatasetRef, dest: Path) -> None:
        """Wait while a live batch pull of ``ref`` stages its files (lazy readers; see ``_localbatch``).

        A batch takes no per-file leases: a reader that copied a file meanwhile would copy its
        bytes a second time and could not publish into the folder the batch renames into place.
        """
        staging = staging_dir(self.layout.data_dir(ref))
        while staging.exists() and not dest.exists() and self._owner_alive(ref):
            time.sleep(_POLL)

    @staticmethod
    def _present(dest: Path, src: SourceFile) -> bool:
        try:
            size = dest.stat().st_size
        except FileNotFoundError:
            return False
        return src.size is None or size == src.size

    def ensure_file(
        self,
        key: str,
        fs: Any,
        src: SourceFile,
        dest: Path,
        *,
        tracker: ProgressTracker | None = None,
        parent: Lease | None = None,
        connections: int | None = None,
        sync: bool = True,
    ) -> FileRecord:
        """Make ``dest`` hold ``src``; one writer per file across processes (shared-cache fill).

        ``sync=False``: the caller syncs the file system after a batch (``_pull_dataset``).
        """
        n = self.settings.pull_connections if connections is None else connections
        lease = Lease(self.layout.file_lease_path(key, src.rel), ttl=self.settings.lock_ttl)
        while True:
            if self._present(dest, src):
                if tracker is not None:
                    tracker.file_done()
                sha = sha256_file(dest) if tracker is not None else None
                return FileRecord(src.rel, dest.stat().st_size, sha, src.etag)
            if lease.try_acquire():
                try:
                    with lease.renewing():
                        if self._present(dest, src):
                            continue
                        return fetch_file(
                            fs,
                            src,
                            dest,
                            tracker=tracker,
                            leases=(lease,) if parent is None else (lease, parent),
                            connections=n,
                            sync=sync,
                        )
                finally:
                    lease.release()
            time.sleep(_POLL / 2)

    def _pull_model(
        self,
        ref: ModelRef,
        progress: ProgressCallback | None,
        connections: int,
        patterns: tuple[tuple[str, ...], tuple[str, ...]],
    ) -> EntryStatus:
        if self.layout.read_manifest(ref) is None and not self.layout.record_path(ref).exists():
            self._claim_name(ref)
            entry = Entry(ref.kind, ref.name, ref.revision, f"hf:{ref.name}", str(ref), owner=current_owner())
            self.layout.write_entry(ref, entry)
        if self.layout.read_manifest(ref) is None or patterns != ((), ()):
            self._check_owner(ref, "pull")
        tracker = self._tracker(ref, progress)
        allow, ignore = patterns
        extended = False

        def work(lease: Lease) -> Manifest:
            nonlocal extended
            old = self.layout.read_manifest(ref)
            # New patterns on a cached entry add files of the same commit to it.
            at = ref if old is None or not old.commit else dataclasses.replace(ref, revision=old.commit)
            if old is not None:
                self.layout.unpublish(ref, old)
            snap = pull_model(
                at,
                self.hf_cache_dir,
                tracker,
                connections=connections,
                allow=allow,
                ignore=ignore,
                have=old.files if old is not None else (),
                lease=lease,
            )
            if at is not ref:
                write_ref(self.hf_cache_dir / ref.folder, ref.revision, snap.commit)
            extended = True
            return Manifest(str(ref), snap.files, time.time(), snap.commit)

        def needed() -> bool:
            return not extended and (self.layout.read_manifest(ref) is None or bool(allow or ignore))

        try:
            self._single_flight(ref, tracker, work, needed)
        except NotFoundError:
            if self.layout.read_manifest(ref) is None:
                self.layout.remove_record(ref)  # a repo or revision that does not exist leaves no entry
            raise
        return self._finish(ref, tracker)

    @translate_permissions("import a model into the store")
    def import_model(
        self, path: str | os.PathLike[str], *, repo: str, progress: ProgressCallback | None = None
    ) -> Entry:
        """Copy a local HF-format folder into the store as model ``repo`` (``ORG/REPO[@REV]``)."""
        ref = parse_hf(repo if repo.startswith("hf:") else f"hf:{repo}")
        source = Path(path).expanduser().absolute()
        self._prepare()
        if self.layout.read_manifest(ref) is not None:
            raise ConflictError(
                f"{ref} is already in the store", hint=f"`starverse store rm {ref}` first to replace it"
            )
        if self.layout.record_path(ref).exists():
            self._check_owner(ref, "import over")
        else:
            self._claim_name(ref)
        entry = Entry(ref.kind, ref.name, ref.revision, str(source), str(ref), owner=current_owner())
        tracker = self._tracker(ref, progress)

        def work(lease: Lease) -> Manifest:
            snap = import_model_folder(source, ref, self.hf_cache_dir, tracker)
            self.layout.write_entry(ref, entry)
            return Manifest(str(ref), snap.files, time.time(), snap.commit)

        self._single_flight(ref, tracker, work)
        self._finish(ref, tracker)
        return entry


def check_connections(n: object) -> int:
    """A connection count from 1 to 64, else BadInputError."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 64:
        raise BadInputError(
            f"connections must be a whole number from 1 to 64, got {n!r}",
            field="connections",
            hint="e.g. 8 (STARVERSE_PULL_CONNECTIONS sets the default)",
        )
    return n


MAX_PATTERNS = 64
MAX_PATTERN_LEN = 256


def _patterns(value: object, what: str) -> tuple[str, ...]:
    """Glob patterns from a string or a list of strings (untrusted: REST bodies), else BadInputError."""
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    hint = f"a list of at most {MAX_PATTERNS} glob patterns of up to {MAX_PATTERN_LEN} characters, e.g. ['data/en/*']"
    if not isinstance(value, list | tuple) or len(value) > MAX_PATTERNS:
        raise BadInputError(f"{what} must be a list of glob patterns, got {str(value)[:80]!r}", field=what, hint=hint)
    out = []
    for p in value:
        if not isinstance(p, str) or not p.strip() or "\x00" in p or len(p) > MAX_PATTERN_LEN:
            raise BadInputError(f"{what} pattern {str(p)[:80]!r} is empty, too long or not text", field=what, hint=hint)
        out.append(p.strip())
    return tuple(out)


def check_pull_options(
    ref: Ref, *, connections: object = None, allow: object = None, ignore: object = None
) -> tuple[int | None, tuple[str, ...], tuple[str, ...]]:
    """Check :meth:`Catalog.pull`'s options before a pull starts (REST: a 400, not a failed thread)."""
    n = None if connections is None else check_connections(connections)
    patterns = _patterns(allow, "allow"), _patterns(ignore, "ignore")
    if isinstance(ref, DatasetRef) and any(patterns):
        raise BadInputError(
            "allow/ignore patterns choose files of Hugging Face repos",
            field="allow",
            hint="register a subset of a dataset as its own entry: `starverse store add NAME SOURCE/SUBFOLDER`",
        )
    return n, patterns[0], patterns[1]


def run_parallel(
    work: Callable[[SourceFile, int], FileRecord],
    files: Sequence[SourceFile],
    connections: int,
    *,
    per_file: int = 1,
) -> dict[str, FileRecord]:
    """``work(file, per_file)`` for every file, ``connections`` files at a time; the first error wins."""
    if not files:
        return {}
    if connections == 1 or len(files) == 1:
        return {f.rel: work(f, per_file) for f in files}
    out: dict[str, FileRecord] = {}
    with ThreadPoolExecutor(min(connections, len(files)), thread_name_prefix="starverse-file") as pool:
        futures = {pool.submit(work, f, per_file): f for f in files}
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        failed = next((fut for fut in done if fut.exception() is not None), None)
        if failed is not None:
            for fut in futures:
                fut.cancel()
            wait(futures)  # the ones already running end (or fail) before we report
            raise failed.exception()  # type: ignore[misc]
        for fut, f in futures.items():
            out[f.rel] = fut.result()
    return out
