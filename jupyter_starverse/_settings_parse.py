"""The parse rules of the settings: each turns one variable's text into a setting's value.

:mod:`jupyter_starverse._settings` reads the environment and names, for each setting, one rule
here: ``rule(value, name, default)`` gets the variable's text (stripped; ``""`` when unset), its
name (for the error, which names the variable and says what to do) and what an unset variable
means. Nothing here reads ``os.environ``. The checks shared with the GPU pool table
(:func:`check_quantity`, :func:`parse_mapping`, :func:`check_resources`,
:func:`parse_node_affinity`) live here too and are exported by ``_settings``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .errors import BadInputError

#: ``rule(value, name, default) -> value`` (see the module's docstring).
Rule = Callable[[str, str, Any], Any]

#: One nodeSelectorTerm: requirements ``(key, operator, values)``, all of which must hold.
NodeTerm = tuple[tuple[str, str, tuple[str, ...]], ...]
_NODE_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_RESOURCE_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_SLURM_TIME = re.compile(r"^(\d+-\d{1,2}(:\d{1,2}(:\d{1,2})?)?|\d+(:\d{1,2}(:\d{1,2})?)?|unlimited|infinite)$")


def path(value: str) -> Path:
    return Path(value).expanduser().absolute()


def check_quantity(value: object, where: str) -> str:
    """A Kubernetes quantity (``8``, ``500m``, ``64Gi``), as a string; bad input otherwise."""
    text = str(value).strip()
    if not _QUANTITY.match(text):
        raise BadInputError(f"{where}: {value!r} is not a Kubernetes quantity", field=where, hint="e.g. 8, 500m, 64Gi")
    return text


def parse_mapping(raw: str, where: str) -> dict[str, str]:
    """``k=v,k2=v2`` or a JSON object of strings."""
    raw = raw.strip()
    if raw.startswith("{"):
        try:
            data = json.loads(raw)
        except ValueError as e:
            raise BadInputError(f"{where} is not valid JSON: {e}", field=where) from None
        if not isinstance(data, dict):
            raise BadInputError(f"{where} must be a JSON object", field=where)
        return {str(k): str(v) for k, v in data.items()}
    out: dict[str, str] = {}
    for item in filter(None, (i.strip() for i in raw.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise BadInputError(f"{where}: {item!r} is not KEY=VALUE", field=where, hint="e.g. a=1,b=2")
        out[key.strip()] = value.strip()
    return out


def check_resources(data: Mapping[str, object], where: str) -> dict[str, str]:
    """Extra extended resources (``{"rdma/hca": "1"}``): valid names and quantities."""
    out = {}
    for name, value in data.items():
        if not _RESOURCE_NAME.match(str(name)) or str(name) in ("cpu", "memory"):
            raise BadInputError(
                f"{where}: {name!r} is not an extended resource name", field=where, hint="e.g. rdma/hca=1"
            )
        out[str(name)] = check_quantity(value, f"{where}.{name}")
    return out


def parse_node_affinity(data: object, where: str) -> tuple[NodeTerm, ...]:
    """Alternatives of node requirements (nodeSelectorTerms, any one of which may match).

    ``data`` is a JSON list of terms; a term maps a label to a value, a list of values
    (``In``), or ``{"operator": "NotIn|Exists|DoesNotExist|Gt|Lt", "values": [...]}``.
    """
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not data:
        raise BadInputError(
            f"{where}: expected a list of terms",
            field=where,
            hint='e.g. [{"nvidia.com/gpu.product": ["NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-PCIE-80GB"]}]',
        )
    terms: list[NodeTerm] = []
    for i, term in enumerate(data):
        if not isinstance(term, dict) or not term:
            raise BadInputError(f"{where}[{i}] must be a non-empty object of label requirements", field=where)
        reqs = []
        for key, value in term.items():
            if isinstance(value, dict):
                op = str(value.get("operator", "In"))
                values = value.get("values", [])
            else:
                op, values = "In", value if isinstance(value, list) else [value]
            if op not in _NODE_OPERATORS or not isinstance(values, list):
                raise BadInputError(
                    f"{where}[{i}].{key}: operator must be one of {', '.join(_NODE_OPERATORS)}", field=where
                )
            if (op in ("Exists", "DoesNotExist")) != (not values):
                raise BadInputError(f"{where}[{i}].{key}: {op} takes {'no' if values else 'some'} values", field=where)
            reqs.append((str(key), op, tuple(str(v) for v in values)))
        terms.append(tuple(reqs))
    return tuple(terms)


def node_affinity_json(terms: tuple[NodeTerm, ...]) -> list[dict[str, object]]:
    """The JSON form :func:`parse_node_affinity` reads."""
    return [{k: {"operator": op, "values": list(v)} for k, op, v in term} for term in terms]


def text(raw: str, name: str, default: Any) -> Any:
    return raw or default


def lower(raw: str, name: str, default: str) -> str:
    return (raw or default).lower()


def upper(raw: str, name: str, default: str | None) -> str | None:
    return raw.upper() or None


def file(raw: str, name: str, default: Path | None) -> Path | None:
    return path(raw) if raw else None


def directory(raw: str, name: str, default: str) -> Path:
    return path(raw or default)


def store(raw: str, name: str, default: str) -> str:
    """A fsspec URL as given; a path made absolute."""
    where = raw or default
    return where if "://" in where or where.startswith(("file:", "memory:")) else str(path(where))


def choice(choices: tuple[str, ...]) -> Rule:
    def parse(raw: str, name: str, default: str) -> str:
        value = raw.lower() or default
        if value not in choices:
            raise BadInputError(
                f"{name}={value!r} is not one of {', '.join(choices)}",
                field=name,
                hint=f"set {name} to one of: {', '.join(choices)}",
            )
        return value

    return parse


def number(raw: str, name: str, default: float) -> float:
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise BadInputError(f"{name}={raw!r} is not a number", field=name) from None
    if value <= 0:
        raise BadInputError(f"{name} must be positive, got {raw}", field=name)
    return value


def count(most: int) -> Rule:
    def parse(raw: str, name: str, default: int) -> int:
        if not raw:
            return default
        if not raw.isdigit() or not 1 <= int(raw) <= most:
            raise BadInputError(
                f"{name}={raw!r} is not a whole number from 1 to {most}", field=name, hint=f"e.g. {name}={default}"
            )
        return int(raw)

    return parse


def minutes(raw: str, name: str, default: float) -> float:
    """A duration in minutes, ``0`` meaning off (the idle guards)."""
    try:
        value = float(raw) if raw else default
    except ValueError:
        value = -1.0
    if not 0 <= value < 1e6:
        raise BadInputError(
            f"{name}={raw!r} is not a number of minutes >= 0", field=name, hint=f"e.g. {name}=30; 0: off"
        )
    return value


def steps(raw: str, name: str, default: int) -> int:
    return int(minutes(raw, name, default))


def group(raw: str, name: str, default: str | None) -> str | None:
    """A group name or numeric gid (resolved where it is used: the group may live in NSS only)."""
    if not raw:
        return None
    if not re.fullmatch(r"\d{1,10}|[A-Za-z_][A-Za-z0-9_.-]{0,63}\$?", raw):
        raise BadInputError(
            f"{name}={raw!r} is not a group name or gid",
            field=name,
            hint="give a group all users of the store belong to, e.g. ml-team (docs/sharing.md)",
        )
    return raw


def boolean(raw: str, name: str, default: bool) -> bool:
    raw = raw.lower()
    if not raw:
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise BadInputError(f"{name}={raw!r} is not a boolean", field=name, hint=f"set {name} to true or false")


def pod_id(raw: str, name: str, default: int) -> int:
    raw = raw.lower()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) == 0 or int(raw) > 2**31 - 1:
        raise BadInputError(
            f"{name}={raw!r} is not a non-root numeric id",
            field=name,
            hint=f"give a number above 0 (Pod Security 'restricted' refuses root), e.g. {name}=1000",
        )
    return int(raw)


def pod_id_or_none(raw: str, name: str, default: int) -> int | None:
    return None if raw.lower() == "none" else pod_id(raw, name, default)


def names(raw: str, name: str, default: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(x.strip() for x in raw.split(",") if x.strip())


def pairs(raw: str, name: str, default: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(parse_mapping(raw, name).items()))


def resources(raw: str, name: str, default: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(check_resources(parse_mapping(raw, name), name).items()))


def affinity(raw: str, name: str, default: tuple[NodeTerm, ...]) -> tuple[NodeTerm, ...]:
    if not raw:
        return ()
    try:
        data = json.loads(raw)
    except ValueError as e:
        raise BadInputError(
            f"{name} is not valid JSON: {e}",
            field=name,
            hint=f'e.g. {name}=\'[{{"nvidia.com/gpu.product": ["NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-PCIE-80GB"]}}]\'',
        ) from None
    return parse_node_affinity(data, name)


def slurm_partitions(raw: str, name: str, default: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """``cpu=debug,a100-80g=gpu-a100`` (or a JSON object): accelerator -> Slurm partition."""
    table = parse_mapping(raw, name)
    for key, value in table.items():
        if not value or not re.fullmatch(r"[A-Za-z0-9_.,-]+", value):
            raise BadInputError(
                f"{name}: partition {value!r} of {key!r} is not a Slurm partition name",
                field=name,
                hint="e.g. cpu=debug,a100-80g=gpu-a100 (names as `sinfo -s` lists them)",
            )
    return tuple(sorted((k.strip().lower(), v) for k, v in table.items()))


def slurm_time(raw: str, name: str, default: str | None) -> str | None:
    if raw and not _SLURM_TIME.match(raw.lower()):
        raise BadInputError(
            f"{name}={raw!r} is not a Slurm time limit",
            field=name,
            hint="use MINUTES, HH:MM:SS or D-HH:MM:SS, e.g. 2-00:00:00",
        )
    return raw or None


def quantity(raw: str, name: str, default: str | None) -> str | None:
    return check_quantity(raw, name) if raw else None
