"""Dataclasses the catalog hands across module boundaries (all with ``to_json``)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from html import escape
from typing import Any

from .._format import format_bytes as _format_bytes
from .._format import format_count, html_pre, html_table, pretty_text, state_badge
from .._volume import Owner

__all__ = [
    "STATES",
    "Entry",
    "EntryStatus",
    "FileRecord",
    "HoldInfo",
    "PullProgress",
    "StoreListing",
    "VerifyReport",
    "format_bytes",
]

STATES = ("cached", "partial", "missing", "corrupt")


def format_bytes(n: float | None) -> str:
    """``1536`` -> ``'1.5 KiB'`` (see :func:`jupyter_starverse._format.format_bytes`)."""
    return _format_bytes(n)


def _ago(ts: float | None) -> str:
    if ts is None:
        return "never"
    s = max(0.0, time.time() - ts)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s / size:.0f}{unit} ago"
    return f"{s:.0f}s ago"


@dataclass(frozen=True)
class FileRecord:
    """One verified file of an entry.

    ``mtime_ns``/``ctime_ns``: its ``stat`` when the entry was published (after it was made
    read-only), the cheap half of the tamper check (``_seal``); None in older manifests.
    """

    path: str
    size: int
    sha256: str | None = None
    etag: str | None = None
    mtime_ns: int | None = None
    ctime_ns: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "size": self.size, "sha256": self.sha256, "etag": self.etag}
        if self.mtime_ns is not None:  # asdict is slow
            out["mtime_ns"], out["ctime_ns"] = self.mtime_ns, self.ctime_ns
        return out


@dataclass(frozen=True)
class Entry:
    """What the catalog knows about an entry before any byte is pulled.

    ``ref`` is the string every front door accepts: ``name@version`` for datasets,
    ``hf:ORG/REPO@REV`` for models. ``owner`` is who created it: read from the record file
    itself (its uid), never taken from what the record says.
    """

    kind: str
    name: str
    version: str
    source: str
    ref: str
    description: str | None = None
    license: str | None = None
    added_at: float = field(default_factory=time.time)
    owner: Owner | None = None
    # the version a data step made this one from (``corpus@1`` for ``corpus@1-clean``); None: an original
    derived_from: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["owner"] = self.owner.to_json() if self.owner is not None else None
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Entry:
        fields = {k: data[k] for k in cls.__dataclass_fields__ if k in data and k != "owner"}
        owner = data.get("owner")
        if isinstance(owner, dict) and isinstance(owner.get("uid"), int) and isinstance(owner.get("name"), str):
            fields["owner"] = Owner(owner["uid"], owner["name"])
        return cls(**fields)

    def __str__(self) -> str:
        by = f", owner {self.owner}" if self.owner is not None else ""
        return f"{self.ref}  ({self.kind}, source {self.source}{by})"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))

    def _repr_html_(self) -> str:
        rows = [("ref", self.ref), ("kind", self.kind), ("source", self.source), ("owner", str(self.owner or "-"))]
        rows += [(k, v) for k, v in (("description", self.description), ("license", self.license)) if v]
        return html_table(("", ""), rows)


@dataclass(frozen=True)
class EntryStatus:
    """Cache state of one entry on the store: ``cached``, ``partial``, ``missing`` or ``corrupt``.

    ``corrupt``: complete once, but files changed since it was published: their size, mtime or
    ctime differ from the manifest (checked by every ``status``, ``ls`` and ``mount``, one stat
    per file), or ``store verify`` found bytes that differ (``problem`` says which; ``store
    pull`` repairs it). ``note``: what the check could not cover (an older manifest: size only).
    """

    entry: Entry
    state: str
    size: int
    files: int
    expected_size: int | None = None
    last_used: float | None = None
    path: str | None = None
    commit: str | None = None
    pulling: PullProgress | None = None
    problem: str | None = None
    note: str | None = None

    @property
    def ref(self) -> str:
        return self.entry.ref

    def to_json(self) -> dict[str, Any]:
        return {
            "ref": self.entry.ref,
            "kind": self.entry.kind,
            "name": self.entry.name,
            "version": self.entry.version,
            "source": self.entry.source,
            "owner": self.entry.owner.to_json() if self.entry.owner is not None else None,
            "description": self.entry.description,
            "license": self.entry.license,
            "state": self.state,
            "size": self.size,
            "files": self.files,
            "expected_size": self.expected_size,
            "last_used": self.last_used,
            "path": self.path,
            "commit": self.commit,
            "pulling": self.pulling.to_json() if self.pulling else None,
            "problem": self.problem,
            "note": self.note,
        }

    def __str__(self) -> str:
        size = format_bytes(self.size)
        line = (
            f"{self.entry.ref}: {self.state}, {size} in {format_count(self.files)} files, "
            f"last used {_ago(self.last_used)}, owner {self.entry.owner or '-'}"
        )
        if self.path:
            line += f"\n  path: {self.path}"
        if self.problem:
            line += f"\n  {self.problem}\n  see what changed: `starverse store verify {self.ref}`; repair: "
            line += f"`starverse store pull {self.ref}`"
        if self.note:
            line += f"\n  note: {self.note}"
        return line

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))

    def _repr_html_(self) -> str:
        rows = [
            ("ref", escape(self.entry.ref)),
            ("state", state_badge(self.state)),
            ("size", escape(f"{format_bytes(self.size)} in {format_count(self.files)} files")),
            ("last used", escape(_ago(self.last_used))),
            ("owner", escape(str(self.entry.owner or "-"))),
        ]
        if self.path:
            rows.append(("path", escape(self.path)))
        rows += [(k, escape(v)) for k, v in (("problem", self.problem), ("note", self.note)) if v]
        return html_table(("", ""), rows, raw_columns=(1,))


@dataclass(frozen=True)
class StoreListing:
    """``starverse store ls``: every entry with its state (a table as text)."""

    entries: tuple[EntryStatus, ...]

    def to_json(self) -> list[dict[str, Any]]:
        return [e.to_json() for e in self.entries]

    def __str__(self) -> str:
        if not self.entries:
            return "The store is empty. Add a dataset with `starverse store add NAME SOURCE` or pull hf:ORG/REPO."
        rows = [("REF", "KIND", "OWNER", "STATE", "SIZE", "FILES", "LAST USE")]
        for e in self.entries:
            state = e.state if e.pulling is None else f"{e.state} (pulling {e.pulling.percent:.0f}%)"
            owner = str(e.entry.owner or "-")
            rows.append((e.ref, e.entry.kind, owner, state, format_bytes(e.size), format_count(e.files),
                         _ago(e.last_used)))  # fmt: skip
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
        chains = self.derivations()
        if chains:  # which version a step made from which; a bare NAME means the chain's first
            lines += ["", "derived versions (a bare NAME mounts the first; name the others: NAME@VERSION):"]
            lines += [f"  {chain}" for chain in chains]
        bad = [e for e in self.entries if e.problem]
        lines += [f"{e.ref}: {e.problem}" for e in bad]
        if bad:
            lines.append("see what changed: `starverse store verify REF`; repair: `starverse store pull REF`")
        return "\n".join(lines)

    def derivations(self) -> list[str]:
        """``corpus: 1 -> 1-clean -> 1-clean-dedup``, one line per derived version nothing was made from."""
        by_ref = {e.ref: e.entry for e in self.entries if e.entry.kind == "dataset"}
        parents = {ref: entry.derived_from for ref, entry in by_ref.items() if entry.derived_from in by_ref}
        made_from = set(parents.values())
        out = []
        for ref in sorted(r for r in parents if r not in made_from):
            chain, seen = [ref], {ref}
            while chain[-1] in parents and parents[chain[-1]] not in seen:
                chain.append(str(parents[chain[-1]]))
                seen.add(chain[-1])
            out.append(f"{by_ref[ref].name}: " + " -> ".join(by_ref[r].version for r in reversed(chain)))
        return out

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))

    def _repr_html_(self) -> str:
        if not self.entries:
            return f"<div>{escape(str(self))}</div>"
        rows = []
        for e in self.entries:
            badge = state_badge(e.state) + (f" pulling {e.pulling.percent:.0f}%" if e.pulling is not None else "")
            rows.append((escape(e.ref), escape(e.entry.kind), escape(str(e.entry.owner or "-")), badge,
                         format_bytes(e.size), format_count(e.files), escape(_ago(e.last_used))))  # fmt: skip
        chains = "".join(f"<div><small>{escape(c)}</small></div>" for c in self.derivations())
        return html_table(("ref", "kind", "owner", "state", "size", "files", "last use"), rows,
                          raw_columns=(0, 1, 2, 3, 4, 5, 6)) + chains  # fmt: skip


@dataclass(frozen=True)
class PullProgress:
    """A snapshot of one pull, also persisted on the store for other processes to show.

    ``phase`` is ``waiting`` (another process pulls), ``downloading``, ``verifying``,
    ``done`` or ``failed``; ``owner`` is True in the process that moves the bytes.
    """

    ref: str
    phase: str
    bytes_done: int
    bytes_total: int | None
    files_done: int
    files_total: int | None
    rate: float
    eta_s: float | None
    owner: bool
    updated_at: float
    error: str | None = None

    @property
    def percent(self) -> float:
        if not self.bytes_total:
            return 100.0 if self.phase == "done" else 0.0
        return min(100.0, 100.0 * self.bytes_done / self.bytes_total)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["percent"] = self.percent
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PullProgress:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    def __str__(self) -> str:
        eta = "-" if self.eta_s is None else f"{self.eta_s:.0f}s"
        return (
            f"{self.ref}: {self.phase} {format_bytes(self.bytes_done)}/{format_bytes(self.bytes_total)} "
            f"({self.percent:.0f}%), {format_bytes(self.rate)}/s, ETA {eta}"
        )

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))


@dataclass(frozen=True)
class VerifyReport:
    """``starverse store verify REF``: every file of a cached entry against its manifest."""

    ref: str
    path: str
    checked: int
    tampered: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()
    unhashed: int = 0
    verified_at: float = field(default_factory=time.time)
    owner_changed: tuple[str, ...] = ()  # the manifest, the folder or files not owned by the entry's owner
    owner: str | None = None  # the entry's owner, for the report
    touched: int = 0  # files whose mtime/ctime changed but whose bytes match their sha256
    size_only: int = 0  # files the manifest had no mtime/ctime of (an older manifest)
    resealed: bool = False  # the owner's (or root's) verify recorded their stamps as they are now

    @property
    def ok(self) -> bool:
        return not (self.tampered or self.missing or self.extra or self.owner_changed)

    @property
    def state(self) -> str:
        return "cached" if self.ok else "corrupt"

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["tampered"], out["missing"], out["extra"] = list(self.tampered), list(self.missing), list(self.extra)
        out["owner_changed"] = list(self.owner_changed)
        out["ok"] = self.ok
        out["state"] = self.state
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> VerifyReport:
        """Parse a stored report; ``ValueError``/``TypeError``/``KeyError`` when malformed."""
        keys = ("tampered", "missing", "extra", "owner_changed")
        lists = {k: tuple(str(p) for p in data.get(k) or ()) for k in keys}
        owner = data.get("owner")
        return cls(
            str(data["ref"]),
            str(data["path"]),
            int(data["checked"]),
            unhashed=int(data.get("unhashed", 0)),
            touched=int(data.get("touched", 0)),
            size_only=int(data.get("size_only", 0)),
            resealed=bool(data.get("resealed", False)),
            verified_at=float(data.get("verified_at", 0.0)),
            owner=owner if isinstance(owner, str) else None,
            **lists,
        )

    def __str__(self) -> str:
        if self.ok:
            note = f" ({self.unhashed} without a recorded sha256: size only)" if self.unhashed else ""
            line = f"{self.ref}: ok, {self.checked} files match their recorded size and sha256{note}"
            what = []
            if self.touched:
                what.append(f"{self.touched} files were touched (mtime/ctime changed, same bytes)")
            if self.size_only:
                what.append(f"the manifest had no mtime/ctime of {self.size_only} files")
            if what:
                done = "their stamps are recorded now" if self.resealed else "only its owner's verify records them"
                line += f"\n  {'; '.join(what)}: {done}"
            return line
        lines = [f"{self.ref}: CORRUPT ({self.path})"]
        if self.owner_changed:
            lines[0] = f"{self.ref}: CORRUPT: owner changed ({self.path}; the entry belongs to {self.owner})"
        groups = (("owner changed", self.owner_changed), ("tampered", self.tampered), ("missing", self.missing),
                  ("extra", self.extra))  # fmt: skip
        for kind, paths in groups:
            lines.extend(f"  {kind}: {p}" for p in paths[:20])
            if len(paths) > 20:
                lines.append(f"  ... and {len(paths) - 20} more {kind}")
        lines.append(f"  repair with `starverse store pull {self.ref}`")
        return "\n".join(lines)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))

    def _repr_html_(self) -> str:
        return f"<div>{state_badge(self.state)}</div>{html_pre(str(self))}"


@dataclass(frozen=True)
class HoldInfo:
    """A usage lease: a job (``holder``) reads an entry; ``store rm`` and ``evict`` refuse meanwhile."""

    ref: str
    holder: str
    host: str
    pid: int
    uid: int
    created_at: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.holder} (pid {self.pid} on {self.host}, uid {self.uid})"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))
