"""One classification of our errors; the HTTP status and the exit code follow from it."""

from __future__ import annotations

import pytest

from jupyter_starverse import errors
from jupyter_starverse.cli._common import exit_code_for
from jupyter_starverse.server._base import status_for


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (errors.BadInputError("x"), 400, 2),
        (errors.InvalidNameError("x"), 400, 2),
        (errors.PermissionDeniedError("x"), 403, 6),
        (errors.NotFoundError("x"), 404, 3),
        (errors.ConflictError("x"), 409, 4),
        (errors.LockTimeoutError("x"), 409, 4),
        (errors.BackendUnavailableError("x"), 503, 5),
        (errors.MissingDependencyError("kubernetes", extra="kubernetes"), 503, 5),
        (errors.StoreError("disk full"), 500, 1),
        (errors.IntegrityError("bad sha"), 500, 1),
    ],
)
def test_status_and_exit_code(error: errors.StarverseError, status: int, code: int) -> None:
    assert status_for(error) == status
    assert exit_code_for(error) == code


def test_unexpected_exceptions_are_internal() -> None:
    assert errors.error_kind(RuntimeError("boom")) == "internal"
    assert status_for(RuntimeError("boom")) == 500


def test_the_hint_is_part_of_the_message() -> None:
    err = errors.MissingDependencyError("kubernetes", extra="kubernetes", purpose="the Kubernetes backend")
    assert str(err) == (
        "The package 'kubernetes' is required for the Kubernetes backend but is not installed "
        "(pip install jupyter_starverse[kubernetes])"
    )
