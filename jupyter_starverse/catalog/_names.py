"""Names, refs and safe paths: the only place that turns user text into store paths.

Invariants (tested): a validated name never contains ``/``, ``\\``, ``..``, a NUL or a
leading dot, so ``store / name`` can never leave the store; :func:`safe_join` re-checks
every relative path coming from a source listing or a model folder.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from jupyter_starverse.errors import InvalidNameError

__all__ = ["DEFAULT_VERSION", "DatasetRef", "ModelRef", "Ref", "check_name", "check_relative", "parse_ref", "safe_join"]

DEFAULT_VERSION = "1"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_HF_PART_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_REV_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")
_NAME_HINT = "use 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit (no '/', no '..')"
# Endings of the store's own files (``VERSION.manifest.json``, part, temp, lease files): a name,
# version or revision ending so could overwrite another entry's manifest or the store's state.
RESERVED_SUFFIXES = (".manifest", ".part", ".tmp", ".lease", ".stale")


def check_reserved(value: str, *, what: str) -> str:
    """Raise :class:`InvalidNameError` if ``value`` ends with a suffix the store uses for its own files."""
    lowered = value.lower()  # case-insensitive file systems (macOS, SMB) collide too
    for suffix in RESERVED_SUFFIXES:
        if lowered.endswith(suffix):
            stem = value[: -len(suffix)] or "1"
            raise InvalidNameError(
                f"{what} {value!r} ends with {value[-len(suffix) :]!r}, which the store reserves for its own files",
                field=what,
                hint=f"use another {what}, e.g. {stem + '-' + suffix[1:]!r}; "
                f"reserved endings: {', '.join(RESERVED_SUFFIXES)}",
            )
    return value


def check_name(value: object, *, what: str = "name") -> str:
    """Return ``value`` if it is a valid entry name or version, else raise :class:`InvalidNameError`."""
    if not isinstance(value, str) or not _NAME_RE.match(value) or ".." in value:
        raise InvalidNameError(f"{what} {value!r} is not allowed", field=what, hint=_NAME_HINT)
    return check_reserved(value, what=what)


@dataclass(frozen=True)
class DatasetRef:
    """A dataset entry: ``name`` or ``name@version`` (version None: the newest one)."""

    name: str
    version: str | None = None

    @property
    def kind(self) -> str:
        return "dataset"

    def __str__(self) -> str:
        return self.name if self.version is None else f"{self.name}@{self.version}"


@dataclass(frozen=True)
class ModelRef:
    """A Hugging Face repo: ``hf:ORG/REPO[@REVISION]`` (a model) or ``hf:datasets/ORG/NAME[@REVISION]``.

    The revision defaults to ``main``; ``repo_type`` is huggingface_hub's (``model``/``dataset``).
    """

    org: str
    repo: str
    revision: str = "main"
    repo_type: str = "model"

    @property
    def kind(self) -> str:
        return "model" if self.repo_type == "model" else "hf-dataset"

    @property
    def repo_id(self) -> str:
        return f"{self.org}/{self.repo}"

    @property
    def name(self) -> str:
        """The entry's name: ``ORG/REPO``, or ``datasets/ORG/NAME`` for a dataset repo."""
        return self.repo_id if self.repo_type == "model" else f"datasets/{self.repo_id}"

    @property
    def folder(self) -> str:
        """Folder name used by huggingface_hub's cache for this repo."""
        return f"{self.repo_type}s--{self.org}--{self.repo}"

    @property
    def revision_key(self) -> str:
        """The revision as one safe file-name component (branches may contain ``/``)."""
        return self.revision.replace("/", "%2F")

    def __str__(self) -> str:
        return f"hf:{self.name}@{self.revision}"


Ref = DatasetRef | ModelRef


def _bad_hf(text: str, why: str) -> InvalidNameError:
    return InvalidNameError(
        f"{text!r} is not a valid model reference: {why}",
        field="ref",
        hint="write hf:ORG/REPO[@REVISION] for a model or hf:datasets/ORG/NAME[@REVISION] for a dataset, "
        "e.g. hf:gpt2/gpt2@main",
    )


def parse_hf(text: str) -> ModelRef:
    """Parse ``hf:ORG/REPO[@REV]`` or ``hf:datasets/ORG/NAME[@REV]`` strictly."""
    body = text[3:]
    repo_type = "model"
    if body.startswith("datasets/"):
        body, repo_type = body[len("datasets/") :], "dataset"
    repo_part, sep, rev = body.partition("@")
    if sep and not rev:
        raise _bad_hf(text, "empty revision after '@'")
    parts = repo_part.split("/")
    if len(parts) != 2:
        raise _bad_hf(text, "expected exactly one '/' between organisation and repository")
    for part in parts:
        if not _HF_PART_RE.match(part) or ".." in part or "--" in part:
            raise _bad_hf(text, f"{part!r} is not a valid organisation or repository name")
    revision = rev or "main"
    if not _REV_RE.match(revision) or ".." in revision or "//" in revision or revision.endswith("/"):
        raise _bad_hf(text, f"{revision!r} is not a valid revision")
    check_reserved(revision, what="revision")
    return ModelRef(parts[0], parts[1], revision, repo_type)


def parse_ref(text: object) -> Ref:
    """Parse a dataset name (``name[@version]``) or a Hugging Face ref (``hf:[datasets/]ORG/REPO[@REV]``)."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidNameError(f"{text!r} is not a catalog reference", field="ref", hint=_NAME_HINT)
    text = text.strip()
    if text.startswith("hf:"):
        return parse_hf(text)
    name, sep, version = text.partition("@")
    check_name(name)
    if sep:
        check_name(version, what="version")
        return DatasetRef(name, version)
    return DatasetRef(name)


def check_relative(relative: str) -> None:
    """Raise InvalidNameError unless ``relative`` is a relative POSIX path without ``..`` (no Path objects)."""
    bad = (
        not relative
        or "\\" in relative
        or "\x00" in relative
        or relative.startswith("/")
        or "//" in relative
        or ".." in relative.split("/")
    )
    if bad:
        raise InvalidNameError(
            f"path {relative!r} would leave the store",
            field="path",
            hint="entries may only contain relative paths without '..'",
        )


def safe_join(root: Path, relative: str) -> Path:
    """Join a relative POSIX path under ``root``; raise if it is absolute or escapes ``root``."""
    check_relative(relative)
    pure = PurePosixPath(relative)
    if pure.is_absolute():
        raise InvalidNameError(f"path {relative!r} would leave the store", field="path")
    out = root.joinpath(*pure.parts)
    if not out.is_relative_to(root):  # belt and braces
        raise InvalidNameError(f"path {relative!r} would leave the store", field="path")
    return out
