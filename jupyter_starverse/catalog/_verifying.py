"""Verifying an entry against its manifest, and the repair a pull does first.

:class:`Verifying` hashes every file of a pulled entry against the size and sha256 recorded at
pull time and checks who owns the manifest, folders and files; the owner's (or root's) finding
is recorded on the store (the entry is ``corrupt`` for everyone until a pull repairs it), and
intact bytes whose stamps changed are re-sealed. :meth:`~Verifying._repair` drops what a
verify found wrong, so the next pull fetches just that again.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path

from jupyter_starverse._volume import Owner, inside
from jupyter_starverse.errors import ConflictError, PermissionDeniedError

from ._catbase import CatalogBase
from ._layout import Manifest
from ._lease import Lease
from ._models import sha256_file
from ._names import DatasetRef, ModelRef, Ref, parse_ref, safe_join
from ._perms import translate_permissions
from ._progress import write_json_atomic
from ._types import FileRecord, VerifyReport

__all__ = ["Verifying"]

log = logging.getLogger(__name__)


class Verifying(CatalogBase):
    """``verify`` and the repair before a pull (see the module)."""

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
