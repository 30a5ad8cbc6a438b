"""Every exception jupyter_starverse raises on purpose.

One hierarchy, four families that the front doors map once: bad input (HTTP 400),
missing (404), conflict (409), backend unavailable (503). Each error carries a ``hint``
that tells the user what to do next; front doors print ``str(err)`` which includes it.
"""

from __future__ import annotations

from collections.abc import Iterable

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
    "OPTIONAL_PACKAGES",
    "did_you_mean",
    "error_kind",
    "missing_dependency",
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


def did_you_mean(name: str, known: Iterable[str], *, suffix: str = " ") -> str:
    """``"did you mean 'mycorpus'?"`` (plus ``suffix``) for a mistyped ``name``, else ``""``.

    The one spelling helper of every door (datasets, models, recipes, jobs, GPU types):
    difflib's closest match at a ratio of 0.6 or more, compared case-insensitively.
    """
    import difflib

    choices = {str(k).lower(): str(k) for k in known}
    close = difflib.get_close_matches(str(name).lower(), list(choices), n=1, cutoff=0.6)
    if not close or choices[close[0]] == name:
        return ""
    return f"did you mean {choices[close[0]]!r}?{suffix}"


# Optional packages (import name -> the extra of pyproject.toml that brings it): a
# ModuleNotFoundError for one of them that reaches a front door is an install hint, not a
# traceback, wherever the import happened (a job's helper, a step's inner loop).
OPTIONAL_PACKAGES: dict[str, str] = {
    "torch": "train",
    "numpy": "train",
    "tensorboard": "train",
    "kubernetes": "kubernetes",
    "aiohttp": "http",
    "requests": "http",
    "datasketch": "data",
    "jieba": "data",
    "pyarrow": "data",
    "transformers": "models",
    "tokenizers": "models",
    "safetensors": "models",
    "PIL": "models",
    "onnx": "export",
    "onnxruntime": "export",
    "onnxscript": "export",
    "sacrebleu": "eval",
    "jupyterlab": "workspace",
    "ipykernel": "workspace",
}


def missing_dependency(error: BaseException) -> MissingDependencyError | None:
    """The install hint for ``error`` when it is (or was caused by) a missing optional package."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, MissingDependencyError):
            return current
        if isinstance(current, ModuleNotFoundError) and current.name:
            top = current.name.split(".")[0]
            if top in OPTIONAL_PACKAGES:
                return MissingDependencyError(top, extra=OPTIONAL_PACKAGES[top])
        current = current.__cause__ or current.__context__
    return None


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
