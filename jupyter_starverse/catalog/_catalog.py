"""The catalog service: add, pull (single-flight), mount (O(1)), status, verify, hold, evict, remove."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from jupyter_starverse._settings import Settings
from jupyter_starverse._volume import Owner, check_owned, current_owner, group_id, inside, may_act
from jupyter_starverse.errors import (
    BadInputError,
    ConflictError,
    InvalidNameError,
    NotFoundError,
    PermissionDeniedError,
    StoreError,
)

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
from ._holds import Hold, live_holds, new_hold
from ._layout import Layout, Manifest, dir_bytes, store_root
from ._lease import Lease
from ._localbatch import copy_batch, staging_dir
from ._models import import_model_folder, pull_model, sha256_file, write_ref
from ._names import DEFAULT_VERSION, DatasetRef, ModelRef, Ref, check_name, parse_hf, parse_ref, safe_join
from ._perms import denied, make_dirs, prepare_shared, resolve_group, tighten, translate_permissions
from ._progress import ProgressCallback, ProgressTracker, read_progress, write_json_atomic
from ._seal import StatCheck, check
from ._sources import check_source
from ._types import Entry, EntryStatus, FileRecord, HoldInfo, PullProgress, VerifyReport

__all__ = ["Catalog", "check_pull_options"]

_POLL = 0.1
_REMOTE_BATCH = 64  # small files of a first pull from a remote source fetched as one staged batch from here
_RUNNING = ("downloading", "verifying")
# The folders every user adds entries to; in group mode they are the group's, setgid and sticky
# (3775: nobody renames or removes another's entry). An entry's own folder is its owner's (2750).
_SHARED = (
    "catalog",
    "catalog/datasets",
    "catalog/models",
    "data",
    "hf",
    "hf/hub",
    "hf/hub/.locks",
    ".leases",
    ".progress",
    ".usage",
    ".holds",
    ".verify",
    "envs",  # job environments (jupyter_starverse.envs): content-addressed, built by any member
    "envs/wheels",
    "envs/images",
    "workdirs",
)
log = logging.getLogger(__name__)


class Catalog:
    """Datasets and Hugging Face models on the shared store.

    Parameters
    ----------
    settings
        ``settings.store`` is the store folder (local disk or a shared volume mounted at the
        same path on every node); ``settings.lock_ttl`` the pull lease lifetime.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.root = store_root(settings.store)
        self.layout = Layout(self.root)
        self._prepared = False

    def prepare(self) -> None:
        """Give the store's shared folders to the group (group mode); a no-op without one."""
        self._prepare()

    def _prepare(self) -> None:
        """Group mode (``settings.shared_group``): the store's folders belong to the group, 3775."""
        if self._prepared or not self.settings.shared_group:
            return
        prepare_shared(self.root, resolve_group(self.settings.shared_group), _SHARED)
        self._prepared = True

    # -- owners ------------------------------------------------------------------------
    @property
    def _admin_gid(self) -> int | None:
        return group_id(self.settings.admin_group)

    def _check_owner(self, ref: Ref, action: str, *, link_ok: bool = False) -> Owner:
        """The owner of ``ref``; PermissionDeniedError (403) unless we may ``action`` it (owner, root, admin)."""
        owner = self.layout.entry_owner(ref, link_ok=link_ok)  # refuses a record that is a link
        if not may_act(owner.uid, self._admin_gid):
            raise PermissionDeniedError(
                f"cannot {action} {ref}: it belongs to {owner.name} (uid {owner.uid}), not to you",
                hint=f"only its owner or a member of STARVERSE_ADMIN_GROUP may; ask {owner.name}, "
                "or use your own entry (`starverse store add NEWNAME SOURCE`)",
            )
        check_owned(self.layout.record_path(ref), action, self._admin_gid)
        return owner

    def _claim_name(self, ref: Ref) -> None:
        """Take ``ref``'s name (its records' folder) or check that it is ours: a name belongs to its creator.

        Another user's ``store add NAME`` (a new version of it too) is refused, so an unpinned
        ``mount NAME`` of the first user never resolves to another's data.
        """
        owner = self.layout.name_owner(ref)
        if owner is None:
            make_dirs(self.layout.name_folder(ref))
            owner = self.layout.name_owner(ref)  # a racing creator may have won: theirs then
        assert owner is not None
        if not may_act(owner.uid, self._admin_gid):
            what = f"the name {ref.name!r}" if isinstance(ref, DatasetRef) else f"{ref.name} in this store"
            raise PermissionDeniedError(
                f"{what} belongs to {owner.name} (uid {owner.uid}): you cannot add a version of it",
                hint=f"pick another name for yours, e.g. {ref.name}-{current_owner().name.replace(' ', '')}"
                if isinstance(ref, DatasetRef)
                else f"ask {owner.name} to pull it, or an admin (STARVERSE_ADMIN_GROUP)",
            )
        tighten(self.layout.name_folder(ref))

    def _check_data_folder(self, ref: DatasetRef, owner: Owner) -> None:
        """``data/NAME/`` must be the entry owner's (or root's): nobody else's folder is filled."""
        folder = self.layout.data_dir(ref).parent
        inside(self.root, folder)
        try:
            st = os.lstat(folder)
        except FileNotFoundError:
            return
        if st.st_uid not in (owner.uid, 0):
            other = Owner.of_uid(st.st_uid)
            raise PermissionDeniedError(
                f"cannot pull {ref}: {folder} belongs to {other.name} (uid {other.uid}), not to {owner.name}",
                hint=f"someone else made the data folder of {ref.name!r}: {other.name} or an admin should remove it",
            )
        tighten(folder)

    # -- paths and environment ---------------------------------------------------
    @property
    def hf_cache_dir(self) -> Path:
        """``HF_HUB_CACHE`` inside the store (huggingface_hub's cache layout)."""
        return self.layout.hf_cache

    def job_env(self) -> dict[str, str]:
        """Variables every job process gets so it finds the store and loads models offline."""
        return {"STARVERSE_STORE": str(self.root), "HF_HUB_CACHE": str(self.hf_cache_dir), "HF_HUB_OFFLINE": "1"}

    # -- entries -------------------------------------------------------------------
    @translate_permissions("add a dataset to the store")
    def add_dataset(
        self,
        name: str,
        source: str,
        *,
        version: str | None = None,
        description: str | None = None,
        license: str | None = None,
        derived_from: str | None = None,
    ) -> Entry:
        """Register a dataset (a folder or fsspec URL); nothing is copied until :meth:`pull`.

        ``derived_from`` (``corpus@1``) marks a version a data step made: the bare name keeps
        meaning the newest *original* version (see :meth:`CatalogLayout.resolve`).
        """
        check_name(name)
        version = check_name(version, what="version") if version is not None else DEFAULT_VERSION
        self._prepare()
        if not isinstance(source, str) or not source.strip():
            raise BadInputError(
                "source must be a folder or URL", field="source", hint="e.g. ./data, s3://bucket/prefix"
            )
        source = check_source(source.strip(), self.settings.source_roots, self.root)
        if "://" not in source and not source.startswith("memory:"):
            source = str(Path(source).expanduser().absolute())
        fs, root = open_source(source)
        if not fs.exists(root):
            raise NotFoundError(f"source {source!r} does not exist", hint="check the path or URL")
        ref = DatasetRef(name, version)
        self._claim_name(ref)
        entry = Entry(
            "dataset", name, version, source, str(ref), description, license, owner=current_owner(),
            derived_from=derived_from,
        )  # fmt: skip
        old = self.layout.create_entry(ref, entry)  # atomic: of racing adds exactly one writes
        if old is None:
            return entry
        if old.source != source:
            raise ConflictError(
                f"{ref} already exists with source {old.source!r}; not adding source {source!r}",
                hint=f"use another --version, or `starverse store rm {ref}` first",
            )
        return old

    @translate_permissions("read the catalog")
    def entry(self, ref: str) -> Entry:
        """The catalog record for ``ref``."""
        return self.layout.read_entry(self.layout.resolve(parse_ref(ref)))

    @translate_permissions("read the store")
    def status(self, ref: str) -> EntryStatus:
        """Cache state of one entry; NotFoundError for unknown names."""
        return self._status(self.layout.resolve(parse_ref(ref)))

    @translate_permissions("list the store")
    def ls(self) -> list[EntryStatus]:
        """Every entry with state, size and last use; a corrupt record is logged and skipped."""
        out = []
        for ref in self.layout.all_refs():
            try:
                out.append(self._status(ref))
            except (StoreError, NotFoundError, PermissionDeniedError) as e:  # corrupt, removed, unreadable
                if not isinstance(e, NotFoundError):
                    log.warning("skipping %s in the listing: %s", ref, e)
        return out

    @translate_permissions("read pull progress")
    def pulls(self, *, recent_s: float = 120.0) -> list[PullProgress]:
        """Pulls running anywhere (persisted by their owners), plus those that ended recently.

        A pull whose owner is gone (killed) shows as ``failed`` with an "interrupted" error.
        """
        out = []
        now = time.time()
        for p in sorted((self.root / ".progress").glob("*.json")):
            prog = read_progress(p)
            if prog is None:
                continue
            age = now - prog.updated_at
            if prog.phase in _RUNNING:
                try:
                    ref: Ref | None = parse_ref(prog.ref)
                except InvalidNameError:
                    ref = None
                if ref is not None and self.layout.progress_path(self.layout.key(ref)) == p:
                    if self._owner_alive(ref):
                        out.append(prog)
                    elif age < recent_s:
                        out.append(self._interrupted(prog))
                elif age < 3 * self.settings.lock_ttl:
                    out.append(prog)
            elif prog.phase in ("done", "failed") and age < recent_s:
                out.append(prog)
        return out

    def _owner_alive(self, ref: Ref) -> bool:
        """True if the lease of ``ref``'s pull is held by a live owner (dead local pids count at once)."""
        holder = Lease(self.layout.lease_path(self.layout.lease_key(ref)), ttl=self.settings.lock_ttl).holder()
        return holder is not None and not holder.is_stale()

    @staticmethod
    def _interrupted(prog: PullProgress) -> PullProgress:
        error = "the pull was interrupted: its process ended; pull again to resume"
        return dataclasses.replace(prog, phase="failed", rate=0.0, eta_s=None, error=error)

    def _status(self, ref: Ref) -> EntryStatus:
        entry = self.layout.read_entry(ref)
        key = self.layout.key(ref)
        manifest = self.layout.read_manifest(ref)
        prog = read_progress(self.layout.progress_path(key))
        pulling = prog if prog is not None and prog.phase in _RUNNING else None
        if pulling is not None and not self._owner_alive(ref):
            pulling = None  # its owner died or ended (checked at once: pid on this host, lease expiry elsewhere)
        last = self.layout.last_used(key)
        if manifest is not None:
            path = self._path(ref, manifest)
            report = self._corrupt(ref, manifest)
            seal = self._stat_check(ref, manifest)  # one stat per file: a change since publication shows at once
            problem = f"`store verify` found {_found(report)}" if report is not None else seal.problem
            return EntryStatus(
                entry,
                "corrupt" if problem else "cached",
                manifest.size,
                len(manifest.files),
                manifest.size,
                last,
                str(path),
                manifest.commit,
                pulling,
                problem=problem,
                note=seal.note,
            )
        if isinstance(ref, DatasetRef):
            size, files = dir_bytes(self.layout.data_dir(ref))
        else:
            size, files = dir_bytes(self.hf_cache_dir / ref.folder / "blobs")
        expected = pulling.bytes_total if pulling else None
        return EntryStatus(entry, "partial" if files else "missing", size, files, expected, last, None, None, pulling)

    def _path(self, ref: Ref, manifest: Manifest) -> Path:
        return self.layout.mount_dir(ref, manifest)

    def _stat_check(self, ref: Ref, manifest: Manifest) -> StatCheck:
        """Size, mtime and ctime of every file (and a dataset's folders) against the manifest (``_seal``)."""
        try:
            return check(str(ref), self._path(ref, manifest), manifest.files, manifest.folders)
        except PermissionError as e:  # a folder we may not search: 403 with the sharing hint, not "corrupt"
            raise denied(e, f"check the files of {ref}") from e

    @translate_permissions("check a store entry")
    def check(self, ref: str) -> StatCheck:
        """The cheap tamper check of a pulled entry: one ``stat`` per file, nothing hashed.

        What ``mount`` refuses on and ``status`` shows; a local job runs it again when it ends
        (a write into its mounts while it ran). ConflictError when ``ref`` is not pulled.
        """
        resolved = self.layout.resolve(parse_ref(ref))
        manifest = self.layout.read_manifest(resolved)
        if manifest is None:
            raise ConflictError(f"{resolved} is not pulled yet", hint=f"run `starverse store pull {resolved}` first")
        return self._stat_check(resolved, manifest)

    @translate_permissions("read the store")
    def readonly_paths(self, ref: str) -> list[Path]:
        """The folders a job's read-only view of ``ref`` covers: its mount folder, and a model's
        ``blobs/`` (what the snapshot's links point to). Empty when ``ref`` is not pulled."""
        resolved = self.layout.resolve(parse_ref(ref))
        manifest = self.layout.read_manifest(resolved)
        if manifest is None:
            return []
        paths = [self._path(resolved, manifest)]
        if isinstance(resolved, ModelRef):
            paths.append(self.hf_cache_dir / resolved.folder / "blobs")
        return [p for p in paths if p.is_dir() and not p.is_symlink()]

    def _corrupt(self, ref: Ref, manifest: Manifest | None) -> VerifyReport | None:
        """The failed ``verify`` report recorded for this publication of ``ref``, if any."""
        path = self.layout.verify_path(self.layout.key(ref))
        try:
            st = os.lstat(path)
            if not os.path.isfile(path) or st.st_uid not in (self.layout.entry_owner(ref).uid, 0):  # noqa: PTH113
                log.warning("ignoring verify record %s: not written by the owner of %s", path, ref)
                return None
            report = VerifyReport.from_json(json.loads(path.read_text()))
        except (FileNotFoundError, NotFoundError):
            return None
        except (OSError, ValueError, TypeError, KeyError) as e:
            log.warning("ignoring unreadable verify record %s: %s", path, e)
            return None
        if report.ok or report.ref != str(ref):
            return None
        if manifest is not None and report.verified_at < manifest.completed_at:
            return None  # recorded before the entry was pulled again
        return report

    # -- mount -----------------------------------------------------------------------
    @translate_permissions("mount a store entry")
    def mount(self, ref: str) -> Path:
        """The read-only folder of a pulled entry: O(1), the same path on every node."""
        resolved = self.layout.resolve(parse_ref(ref))
        self._prepare()
        if self.layout.verify_path(self.layout.key(resolved)).exists():
            report = self._corrupt(resolved, self.layout.read_manifest(resolved))
            if report is not None:
                raise ConflictError(
                    f"{resolved} is corrupt: `store verify` found {_found(report)}",
                    hint=f"repair it with `starverse store pull {resolved}`"
                    + ("; what another user owns needs them or an admin to remove it" if report.owner_changed else ""),
                )
        manifest = self.layout.read_manifest(resolved)
        if manifest is None:
            raise ConflictError(
                f"{resolved} is not pulled yet",
                hint=f"run `starverse store pull {resolved}` first, or read it lazily with catalog.fs(name)",
            )
        self._refuse_foreign(resolved, manifest)
        self._refuse_changed(resolved, manifest)
        self.layout.touch(self.layout.key(resolved))
        return self._path(resolved, manifest)

    def _refuse_changed(self, ref: Ref, manifest: Manifest) -> None:
        """ConflictError naming what changed since publication (one stat per file and folder, no hashing)."""
        seal = self._stat_check(ref, manifest)
        if seal.note:
            log.warning("%s: %s", ref, seal.note)
        if not seal.ok:
            raise ConflictError(
                f"{ref} is corrupt: {seal.problem}",
                hint=f"nothing was mounted; see what changed with `starverse store verify {ref}`, then its owner "
                f"repairs it with `starverse store pull {ref}`",
            )

    def _refuse_foreign(self, ref: Ref, manifest: Manifest | None) -> None:
        """ConflictError when the manifest or the folders a mount hands out are not the entry owner's."""
        foreign = self.layout.foreign(ref, manifest)
        if foreign:
            owner = self.layout.entry_owner(ref)
            raise ConflictError(
                f"{ref} is corrupt: owner changed: {', '.join(foreign)} not {owner.name}'s",
                hint=f"do not use it; {owner.name} or an admin should `starverse store rm {ref}` and pull it again",
            )

    def fs(self, ref: str) -> Any:
        """An fsspec filesystem over a dataset that fills the store's shared cache on first read."""
        from ._cachefs import SharedCacheFileSystem

        resolved = self.layout.resolve(parse_ref(ref))
        if not isinstance(resolved, DatasetRef):
            raise BadInputError(
                "lazy reads are for datasets; pull models instead", field="ref", hint=f"starverse store pull {resolved}"
            )
        return SharedCacheFileSystem(catalog=self, ref=str(resolved))

    # -- pull --------------------------------------------------------------------------
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

    # -- verify ------------------------------------------------------------------------------
    @translate_permissions("verify a store entry")
    def verify(self, ref: str) -> VerifyReport:
        """Check every file of a cached entry against the size and sha256 recorded at pull time,
        and its owner: the manifest, the folders and the files must belong to the entry's owner.

        Reports changed (``tampered``), ``missing`` and ``extra`` files, and what another user
        owns (``owner_changed``: "corrupt: owner changed"). A mismatch found by the owner (or
        root) is recorded on the store: the entry's state becomes ``corrupt`` (for every user)
        until a pull repairs it; another user's verify reports it to them only.
        """
        resolved = self.layout.resolve(parse_ref(ref))
        self._prepare()
        manifest = self.layout.read_manifest(resolved)
        if manifest is None:
            raise ConflictError(
                f"{resolved} is not pulled, there is nothing to verify",
                hint=f"run `starverse store pull {resolved}` first",
            )
        owner = self.layout.entry_owner(resolved)
        trusted = (owner.uid, 0)
        top = self._path(resolved, manifest)
        expected = {f.path: f for f in manifest.files}
        seen: set[str] = set()
        tampered: list[str] = []
        extra: list[str] = []
        foreign = self.layout.foreign(resolved, manifest)
        unhashed = 0
        # stamped before the bytes are read: a write while we hash shows as a changed stamp afterwards
        resealed = self.layout.seal(resolved, manifest) if os.geteuid() in trusted else None
        seal = self._stat_check(resolved, manifest)
        restamped = set(seal.changed)
        try:
            inside(self.root, top)
            walk = list(os.walk(top))  # os.walk never descends into a link
        except PermissionDeniedError:
            walk = []  # the folder is a link: foreign() named it, every file counts as missing
        for dirpath, dirs, names in walk:
            for name in (*dirs, *names):
                full = Path(dirpath) / name
                rel = full.relative_to(top).as_posix()
                if not self._owned(full, trusted):
                    foreign.append(rel + ("/" if name in dirs else ""))
                if name in dirs and not full.is_symlink():
                    continue
                record = expected.get(rel)
                if record is None:
                    extra.append(rel)
                    continue
                seen.add(rel)
                if not self._matches(full, record):
                    tampered.append(rel)
                elif record.sha256 is None:
                    unhashed += 1
                    if rel in restamped:  # written since publication and no hash to clear it
                        tampered.append(rel)
        missing = sorted(set(expected) - seen)
        report = VerifyReport(
            str(resolved),
            str(top),
            len(expected),
            tuple(sorted(tampered)),
            tuple(missing),
            tuple(sorted(extra)),
            unhashed,
            owner_changed=tuple(foreign),
            owner=owner.name,
            touched=len([p for p in seal.changed if not p.endswith("/") and p not in tampered]),
            size_only=seal.size_only,
        )
        unstamped = isinstance(resolved, DatasetRef) and manifest.folders is None
        stale = not seal.ok or seal.size_only or unstamped
        # resealed only if nothing changed while we hashed
        if report.ok and resealed is not None and stale and self._stat_check(resolved, resealed).ok:
            self._write_resealed(resolved, resealed, owner)
            report = dataclasses.replace(report, resealed=True)
        if os.geteuid() in trusted:  # only the owner's (or root's) finding changes the entry for all
            marker = self.layout.verify_path(self.layout.key(resolved))
            try:
                if report.ok:
                    self.layout.remove(marker)
                else:
                    write_json_atomic(marker, report.to_json())
            except (PermissionError, PermissionDeniedError) as e:
                log.warning("cannot record the result of verifying %s: %s", resolved, e)
        return report

    def _write_resealed(self, ref: Ref, manifest: Manifest, owner: Owner) -> None:
        """The owner's (or root's) verify found the bytes intact: record the stamps as they are now."""
        try:
            self.layout.write_manifest(ref, manifest)
            if os.geteuid() == 0 and owner.uid != 0:  # the manifest stays its owner's
                os.chown(self.layout.manifest_path(ref), owner.uid, -1, follow_symlinks=False)
        except (OSError, PermissionDeniedError) as e:
            log.warning("cannot record the new stamps of %s: %s", ref, e)

    @staticmethod
    def _owned(path: Path, trusted: tuple[int, int]) -> bool:
        """``path`` (and, for a model snapshot's link, its blob) belongs to a trusted uid."""
        try:
            if os.lstat(path).st_uid not in trusted:
                return False
            return not path.is_symlink() or path.stat().st_uid in trusted
        except OSError:
            return True  # gone or dangling: counted as missing or tampered instead

    @staticmethod
    def _matches(path: Path, record: FileRecord) -> bool:
        try:
            st = path.stat()  # through a model snapshot's link to its blob
        except OSError:
            return False
        if not path.is_file() or st.st_size != record.size:
            return False
        return record.sha256 is None or sha256_file(path) == record.sha256

    def _repair(self, ref: Ref) -> None:
        """Before a pull: drop what ``verify`` found wrong, so the pull fetches it again (owner only).

        An entry whose stamps changed (``_seal``) and that nobody verified yet is verified first
        by its owner: what is only touched is re-sealed, what changed is fetched again.
        """
        manifest = self.layout.read_manifest(ref)
        report = self._corrupt(ref, manifest)
        if manifest is not None and report is None and not self._stat_check(ref, manifest).ok:
            self._check_owner(ref, "repair")  # another user's pull of a changed entry: 403, not "done"
            found = self.verify(str(ref))
            report = None if found.ok else self._corrupt(ref, manifest)
        if manifest is None or report is None:
            return
        self._check_owner(ref, "repair")
        lease = Lease(self.layout.lease_path(self.layout.lease_key(ref)), ttl=self.settings.lock_ttl)
        self._acquire(lease, ref)
        try:
            top = self._path(ref, manifest)
            inside(self.root, top)
            self.layout.remove(self.layout.manifest_path(ref))
            self.layout.unpublish(ref, manifest)
            hub = self.hf_cache_dir.resolve()
            for rel in (*report.tampered, *report.extra):
                path = safe_join(top, rel)
                inside(self.root, path.parent)
                real = path.resolve() if path.is_symlink() else None
                if real is not None and isinstance(ref, ModelRef) and real.is_relative_to(hub):
                    real.unlink(missing_ok=True)  # a changed blob: the pull downloads it again
                    if rel in report.extra:
                        path.unlink(missing_ok=True)
                else:
                    self.layout.remove(path)  # a link is unlinked, never followed
            self.layout.remove(self.layout.verify_path(self.layout.key(ref)))
        finally:
            lease.release()

    # -- holds (usage leases) ------------------------------------------------------------------
    @translate_permissions("hold a store entry")
    def hold(self, ref: str, holder: str, *, pid: int | None = None) -> Hold:
        """Record that ``holder`` (a job id) reads ``ref`` while process ``pid`` (default: this one) runs.

        ``store rm`` and ``evict`` refuse (ConflictError) while a live hold exists, unless forced.
        Use as a context manager, or call ``release()``; a hold of a dead process on this host
        is ignored and cleaned up.
        """
        resolved = self.layout.resolve(parse_ref(ref))
        self._prepare()
        if self.layout.read_manifest(resolved) is None:
            raise ConflictError(f"{resolved} is not pulled yet", hint=f"run `starverse store pull {resolved}` first")
        hold = new_hold(self.layout.holds_dir(self.layout.key(resolved)), str(resolved), holder, pid, root=self.root)
        hold.write()
        if not self.layout.manifest_path(resolved).exists():  # removed while we wrote: see _holds
            hold.release()
            raise ConflictError(
                f"{resolved} was removed just now", hint=f"pull it again: `starverse store pull {resolved}`"
            )
        return hold

    @translate_permissions("read the holds of a store entry")
    def holders(self, ref: str) -> list[HoldInfo]:
        """The live holds of ``ref`` (jobs reading it)."""
        resolved = self.layout.resolve(parse_ref(ref))
        return self._live_holds(resolved)

    def _live_holds(self, ref: Ref) -> list[HoldInfo]:
        return live_holds(self.layout.holds_dir(self.layout.key(ref)), root=self.root)

    # -- removal ---------------------------------------------------------------------------
    @translate_permissions("remove a store entry")
    def rm(self, name: str, *, force: bool = False) -> list[str]:
        """Remove an entry (all versions of a dataset given without ``@version``) and its bytes.

        Only its owner (or root, or a member of ``STARVERSE_ADMIN_GROUP``) may: that is checked
        for every version before anything is deleted, and so is every path (no link followed).
        Refuses (ConflictError naming the holders) while a live job holds it, unless ``force``.
        """
        parsed = parse_ref(name)
        refs: list[Ref]
        if isinstance(parsed, DatasetRef) and parsed.version is None:
            refs = [r for r in self.layout.all_refs() if isinstance(r, DatasetRef) and r.name == parsed.name]
            if not refs:
                self.layout.resolve(parsed)  # raises NotFoundError with a hint
        else:
            refs = [self.layout.resolve(parsed)]
        for ref in refs:
            self._check_owner(ref, "remove", link_ok=True)
        for ref in refs:
            self.layout.data_paths(ref, self.layout.read_manifest(ref))  # a link in place of a folder: refused
        if not force:
            for ref in refs:
                self._check_unheld(ref, "remove")
        for ref in refs:
            self._drop(ref, keep_record=False, force=force)
        return [str(r) for r in refs]

    @translate_permissions("evict store entries")
    def evict(self, *, max_bytes: int, force: bool = False) -> list[EntryStatus]:
        """Drop least recently used entries' bytes until the store holds at most ``max_bytes``.

        Only entries the caller may change (their own; all for root or an admin) are evicted.
        Entries held by live jobs are skipped (unless ``force``); when the budget cannot be met
        without them, a ConflictError names them after the others were evicted (a
        PermissionDeniedError when what is left belongs to others).
        """
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise BadInputError(f"max_bytes must be a whole number >= 0, got {max_bytes!r}", field="max_bytes")
        entries = [s for s in self.ls() if s.state != "missing"]
        total = sum(s.size for s in entries)
        evicted = []
        held: dict[str, list[HoldInfo]] = {}
        refused: dict[str, str] = {}
        for status in sorted(entries, key=lambda s: s.last_used or 0.0):
            if total <= max_bytes:
                break
            if status.pulling is not None:
                continue
            ref = parse_ref(status.ref)
            owner = status.entry.owner
            if owner is not None and not may_act(owner.uid, self._admin_gid):
                refused[status.ref] = f"it belongs to {owner.name}"
                continue
            holds = [] if force else self._live_holds(ref)
            if holds:
                held[status.ref] = holds
                continue
            try:
                self._drop(ref, keep_record=True, force=force)
            except _HeldError as e:
                held[status.ref] = e.holds
                continue
            except PermissionDeniedError as e:
                log.warning("not evicting %s: %s", status.ref, e)
                refused[status.ref] = str(e)
                continue
            total -= status.size
            evicted.append(status)
        if total > max_bytes and (held or refused):
            done = ", ".join(s.ref for s in evicted) or "nothing"
            others = "; ".join(f"{r}: {why}" for r, why in refused.items())
            if held:
                raise ConflictError(
                    f"cannot evict down to {max_bytes} bytes: {_held_text(held)}"
                    + (f"; not evicted: {others}" if others else "")
                    + f" (evicted {done})",
                    hint="wait for those jobs to end, or `starverse store evict --force` to evict under them",
                )
            raise PermissionDeniedError(
                f"cannot evict down to {max_bytes} bytes: not evicted: {others} (evicted {done})",
                hint="only an entry's owner (or a member of STARVERSE_ADMIN_GROUP) may evict it; ask them",
            )
        return evicted

    def _check_unheld(self, ref: Ref, verb: str) -> None:
        holds = self._live_holds(ref)
        if holds:
            raise _HeldError(ref, holds, verb)

    def _acquire(self, lease: Lease, ref: Ref) -> None:
        deadline = time.monotonic() + 2 * self.settings.lock_ttl
        while not lease.try_acquire():
            if time.monotonic() > deadline:
                raise ConflictError(
                    f"{ref} is being pulled right now", hint="wait for the pull to finish, then try again"
                )
            time.sleep(_POLL)

    def _drop(self, ref: Ref, *, keep_record: bool, force: bool = False) -> None:
        self._check_owner(ref, "remove", link_ok=not keep_record)
        lease = Lease(self.layout.lease_path(self.layout.lease_key(ref)), ttl=self.settings.lock_ttl)
        self._acquire(lease, ref)
        try:
            if not force:
                self._check_unheld(ref, "remove")
            manifest = self.layout.read_manifest(ref)
            self.layout.data_paths(ref, manifest)  # refuses a link before anything is deleted
            self.layout.remove(self.layout.manifest_path(ref))  # nobody can take a new hold from here on
            if not force and manifest is not None:
                try:
                    self._check_unheld(ref, "remove")  # a hold taken between the check and the unlink
                except _HeldError:
                    self.layout.write_manifest(ref, manifest)
                    raise
            self.layout.remove_data(ref, manifest)
            if not keep_record:
                self.layout.remove_record(ref)
            if force:
                self._drop_holds(ref)
        finally:
            lease.release()

    def _drop_holds(self, ref: Ref) -> None:
        """``--force``: the holds' files go too (those we may remove; never through a link)."""
        folder = self.layout.holds_dir(self.layout.key(ref))
        try:
            inside(self.root, folder)
            paths = list(folder.glob("*.json"))
        except (OSError, PermissionDeniedError) as e:
            log.warning("leaving the holds of %s: %s", ref, e)
            return
        for p in paths:
            with contextlib.suppress(OSError, PermissionDeniedError):
                self.layout.remove(p)


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


def _found(report: VerifyReport) -> str:
    """``2 changed (a.txt, b.txt), 1 missing and 0 extra files`` for a failed verify."""
    owner = f"owner changed ({len(report.owner_changed)} paths), " if report.owner_changed else ""
    named = [*report.tampered, *report.missing, *report.extra][:5]
    return (
        f"{owner}{len(report.tampered)} changed, {len(report.missing)} missing and {len(report.extra)} extra files"
        + (f" ({', '.join(named)})" if named else "")
    )


def _held_text(held: dict[str, list[HoldInfo]]) -> str:
    return "; ".join(f"{ref} is held by {', '.join(str(h) for h in holds)}" for ref, holds in held.items())


class _HeldError(ConflictError):
    """A live job holds the entry: removal refused (409)."""

    def __init__(self, ref: Ref, holds: list[HoldInfo], verb: str) -> None:
        super().__init__(
            f"cannot {verb} {ref}: {_held_text({str(ref): holds})}",
            hint=f"wait for the job to end (or cancel it), or `starverse store rm --force {ref}` to remove it "
            "under the running job (its reads will fail)",
        )
        self.holds = holds
