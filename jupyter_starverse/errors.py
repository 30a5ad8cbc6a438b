"""Every exception jupyter_starverse raises on purpose.

One hierarchy, four families that the front doors map once: bad input (HTTP 400),
missing (404), conflict (409), backend unavailable (503). Each error carries a ``hint``
that tells the user what to do next; front doors print ``str(err)`` which includes it.
"""

from __future__ import annotations

__all__ = [
    "StarverseError",
    "BadInputError",
    "InvalidNameError",
    "NotFoundError",
    "ConflictError",
    "LockTimeoutError",
    "BackendUnavailableError",
    "PermissionDeniedError",
    "StoreError",
    "IntegrityError",
    "MissingDependencyError",
    "error_kind",
]


class StarverseError(Exception):
    """Base class of every error we raise on purpose.

    Parameters
    ----------
    message
        What went wrong, in one sentence.
    hint
        What the user can do about it. Shown after the message.
    """

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message} ({self.hint})"
        return self.message


class BadInputError(StarverseError, ValueError):
    """The caller gave something we cannot accept. Nothing was changed."""

    def __init__(self, message: str, *, field: str | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.field = field


class InvalidNameError(BadInputError):
    """A name that would escape the store, is empty, or is not allowed."""


class NotFoundError(StarverseError, LookupError):
    """A named thing (entry, job, experiment, revision) does not exist."""


class ConflictError(StarverseError):
    """The request clashes with existing state (name taken, job already running)."""


class LockTimeoutError(ConflictError):
    """Another process holds the lease for too long."""


class BackendUnavailableError(StarverseError):
    """A backend (Kubernetes API, Hub, object store) cannot be reached or is not configured."""


class PermissionDeniedError(StarverseError):
    """The backend refused the request (for example Kubernetes RBAC)."""


class StoreError(StarverseError):
    """The store could not complete an operation (disk full, I/O error); nothing half-written."""


class IntegrityError(StoreError):
    """Downloaded or cached bytes do not match their expected size or hash."""


class MissingDependencyError(BackendUnavailableError):
    """An optional package is needed for this operation."""

    def __init__(self, package: str, *, extra: str | None = None, purpose: str = "") -> None:
        what = f" for {purpose}" if purpose else ""
        target = f"jupyter_starverse[{extra}]" if extra else package
        super().__init__(
            f"The package {package!r} is required{what} but is not installed",
            hint=f"pip install {target}",
        )
        self.package = package


# The families front doors map (HTTP status, exit code). Most specific first.
_KINDS: tuple[tuple[type[StarverseError], str], ...] = (
    (BadInputError, "bad_input"),
    (PermissionDeniedError, "forbidden"),
    (NotFoundError, "not_found"),
    (ConflictError, "conflict"),
    (BackendUnavailableError, "unavailable"),
)


def error_kind(error: BaseException) -> str:
    """The family of ``error``: bad_input, forbidden, not_found, conflict, unavailable, or internal."""
    for cls, kind in _KINDS:
        if isinstance(error, cls):
            return kind
    return "internal"
