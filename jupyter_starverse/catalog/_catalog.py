"""The catalog service: add, pull (single-flight), mount (O(1)), status, verify, hold, evict, remove.

:class:`Catalog` is what the facade and the front doors use: it adds the entry verbs (add a
dataset, list, status, the cheap tamper check, mount, lazy reads), the holds jobs take on what
they read, and removal and eviction, on top of :mod:`._pulling`, :mod:`._verifying` and
:mod:`._catbase`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

from jupyter_starverse._volume import current_owner, inside, may_act
from jupyter_starverse.errors import (
    BadInputError,
    ConflictError,
    InvalidNameError,
    NotFoundError,
    PermissionDeniedError,
    StoreError,
)

from ._catbase import RUNNING_PHASES, found_text
from ._fetch import open_source
from ._holds import Hold, live_holds, new_hold
from ._layout import Manifest
from ._lease import Lease
from ._names import DEFAULT_VERSION, DatasetRef, ModelRef, Ref, check_name, parse_ref
from ._perms import translate_permissions
from ._progress import read_progress
from ._pulling import Pulling, check_pull_options
from ._seal import StatCheck
from ._sources import check_source
from ._types import Entry, EntryStatus, HoldInfo, PullProgress

__all__ = ["Catalog", "check_pull_options"]

log = logging.getLogger(__name__)


class Catalog(Pulling):
    """Datasets and Hugging Face models on the shared store.

    Parameters
    ----------
    settings
        ``settings.store`` is the store folder (local disk or a shared volume mounted at the
        same path on every node); ``settings.lock_ttl`` the pull lease lifetime.
    """

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
            if prog.phase in RUNNING_PHASES:
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

    @staticmethod
    def _interrupted(prog: PullProgress) -> PullProgress:
        error = "the pull was interrupted: its process ended; pull again to resume"
        return dataclasses.replace(prog, phase="failed", rate=0.0, eta_s=None, error=error)

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
                    f"{resolved} is corrupt: `store verify` found {found_text(report)}",
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
