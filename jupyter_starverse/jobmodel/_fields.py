"""The JSON types each field of a job spec accepts (``JobSpec.from_json``): text, lists, maps,
whole numbers, money, with the size limits that keep a REST body or a spec file from being
absurd, and the hint that says what the field takes. Ranges are the spec's own check
(``JobSpec.__post_init__``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal

from ..errors import BadInputError

__all__ = ["MAX_CODE", "MAX_TEXT", "check_type", "field_error"]


def field_error(field_name: str, why: str, hint: str | None = None) -> BadInputError:
    return BadInputError(f"JobSpec.{field_name}: {why}", field=field_name, hint=hint)


# JSON types each field accepts in ``from_json`` (numbers are checked by range in __post_init__).
_TEXT_FIELDS = ("name", "script", "code", "accelerator", "template", "framework", "billing", "experiment",
                "image", "cpu", "memory", "display_name", "env_from", "workdir", "env_id", "workdir_id")  # fmt: skip
_OPTIONAL = ("script", "code", "command", "steps", "checkpoint_every", "budget", "experiment", "image", "cpu",
             "memory", "display_name", "env_from", "workdir", "env_id", "workdir_id")  # fmt: skip
_LIST_FIELDS = ("command", "args", "mounts", "after", "store_writes")
_MAP_FIELDS = ("env", "secrets", "mount_versions")
_INT_FIELDS = ("nodes", "procs_per_node", "tensor_parallel", "pipeline_parallel", "steps", "max_restarts",
               "checkpoint_every")  # fmt: skip
MAX_TEXT = 4096  # a path, an image, a name; ``code`` may be a whole cell
MAX_CODE = 10_000_000
_MAX_ITEMS = 10_000


def _expected(key: str) -> str:
    if key in _TEXT_FIELDS:
        return 'a string, e.g. "train.py"' if key in ("script", "code") else "a string"
    if key in _LIST_FIELDS:
        return 'a list of strings, e.g. ["--lr", "0.1"]'
    if key in _MAP_FIELDS:
        return 'an object of names to strings, e.g. {"LR": "0.1"}'
    if key in _INT_FIELDS:
        return "a whole number, e.g. 2"
    if key == "budget":
        return 'an amount of money, e.g. 25 or "25.50"'
    return "true or false"


def check_type(key: str, value: object) -> None:
    """Raise BadInputError (with a hint) when ``value`` has the wrong JSON type for field ``key``."""
    try:
        _check_type_of(key, value)
    except BadInputError as e:
        if e.hint is None:
            e.hint = f"{key} takes {_expected(key)}" + (" or null" if key in _OPTIONAL else "")
        raise


def _check_type_of(key: str, value: object) -> None:
    if value is None:
        if key in _OPTIONAL:
            return
        raise field_error(key, "must not be null")
    if key in _TEXT_FIELDS:
        if not isinstance(value, str):
            raise field_error(key, f"must be a string, got {type(value).__name__}")
        if len(value) > (MAX_CODE if key == "code" else MAX_TEXT):
            raise field_error(key, f"is too long ({len(value)} characters)")
    elif key in _LIST_FIELDS:
        if isinstance(value, str) or not isinstance(value, Sequence):
            raise field_error(key, f"must be a list of strings, got {type(value).__name__}", 'e.g. ["--lr", "0.1"]')
        if len(value) > _MAX_ITEMS:
            raise field_error(key, f"has too many items ({len(value)})")
        for item in value:
            ok = isinstance(item, str) or (
                key not in ("mounts", "after") and isinstance(item, (int, float)) and not isinstance(item, bool)
            )
            if not ok or len(str(item)) > MAX_TEXT:
                raise field_error(key, f"items must be strings, got {type(item).__name__}", 'e.g. ["--lr", "0.1"]')
    elif key in _MAP_FIELDS:
        if not isinstance(value, Mapping):
            raise field_error(key, f"must be an object of names to strings, got {type(value).__name__}",
                       'e.g. {"LR": "0.1"}')  # fmt: skip
        if len(value) > _MAX_ITEMS:
            raise field_error(key, f"has too many items ({len(value)})")
        for name, item in value.items():
            if not isinstance(item, (str, int, float)) or len(str(item)) > MAX_TEXT:
                raise field_error(key, f"{str(name)[:64]}: values must be strings, got {type(item).__name__}",
                           'e.g. {"LR": "0.1"}')  # fmt: skip
    elif key in _INT_FIELDS:
        if isinstance(value, bool) or not isinstance(value, int):
            raise field_error(key, f"must be a whole number, got {type(value).__name__}")
    elif key == "budget":
        if isinstance(value, bool) or not isinstance(value, (int, float, str, Decimal)) or len(str(value)) > 64:
            raise field_error(key, 'must be an amount of money such as 25 or "25.50"')
    elif key == "resume" and not isinstance(value, bool):
        raise field_error(key, f"must be true or false, got {type(value).__name__}")
