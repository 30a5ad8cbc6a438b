"""What every part of the catalog service builds on: the store, its owners and an entry's state.

:class:`CatalogBase` holds the settings, the store root and its :class:`~._layout.Layout`; it
gives the store's shared folders to the group (group mode), decides who may act on an entry or
take a name (its owner, root, ``STARVERSE_ADMIN_GROUP``), reads an entry's cache state (the
manifest, its seal stamps, a recorded failed ``verify``, a live pull) and waits for an entry's
lease. The verbs come above it: :mod:`._verifying` (verify, repair), :mod:`._pulling` (pull,
import, the shared-cache fill) and :mod:`._catalog` (add, mount, status, holds, removal).
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

from jupyter_starverse._settings import Settings
from jupyter_starverse._volume import Owner, check_owned, current_owner, group_id, inside, may_act
from jupyter_starverse.errors import ConflictError, NotFoundError, PermissionDeniedError

from ._layout import Layout, Manifest, dir_bytes, store_root
from ._lease import Lease
from ._names import DatasetRef, Ref
from ._perms import denied, make_dirs, prepare_shared, resolve_group, tighten
from ._progress import read_progress
from ._seal import StatCheck, check
from ._types import EntryStatus, VerifyReport

__all__ = ["RUNNING_PHASES", "CatalogBase", "found_text"]

_POLL = 0.1
#: The phases of a pull in progress (its progress record says which).
RUNNING_PHASES = ("downloading", "verifying")
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


class CatalogBase:
    """The store, its owners and the state of an entry on it (see the module).
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

    def _owner_alive(self, ref: Ref) -> bool:
        """True if the lease of ``ref``'s pull is held by a live owner (dead local pids count at once)."""
        holder = Lease(self.layout.lease_path(self.layout.lease_key(ref)), ttl=self.settings.lock_ttl).holder()
        return holder is not None and not holder.is_stale()

    def _status(self, ref: Ref) -> EntryStatus:
        entry = self.layout.read_entry(ref)
        key = self.layout.key(ref)
        manifest = self.layout.read_manifest(ref)
        prog = read_progress(self.layout.progress_path(key))
        pulling = prog if prog is not None and prog.phase in RUNNING_PHASES else None
        if pulling is not None and not self._owner_alive(ref):
            pulling = None  # its owner died or ended (checked at once: pid on this host, lease expiry elsewhere)
        last = self.layout.last_used(key)
        if manifest is not None:
            path = self._path(ref, manifest)
            report = self._corrupt(ref, manifest)
            seal = self._stat_check(ref, manifest)  # one stat per file: a change since publication shows at once
            problem = f"`store verify` found {found_text(report)}" if report is not None else seal.problem
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

    def _acquire(self, lease: Lease, ref: Ref) -> None:
        deadline = time.monotonic() + 2 * self.settings.lock_ttl
        while not lease.try_acquire():
            if time.monotonic() > deadline:
                raise ConflictError(
                    f"{ref} is being pulled right now", hint="wait for the pull to finish, then try again"
                )
            time.sleep(_POLL)


def found_text(report: VerifyReport) -> str:
    """``2 changed (a.txt, b.txt), 1 missing and 0 extra files`` for a failed verify."""
    owner = f"owner changed ({len(report.owner_changed)} paths), " if report.owner_changed else ""
    named = [*report.tampered, *report.missing, *report.extra][:5]
    return (
        f"{owner}{len(report.tampered)} changed, {len(report.missing)} missing and {len(report.extra)} extra files"
        + (f" ({', '.join(named)})" if named else "")
    )
