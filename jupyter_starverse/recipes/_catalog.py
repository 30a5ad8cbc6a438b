"""The built-in recipes and the seeds' reproductions, read from ``recipes.toml`` beside this module.

The catalog is data: one TOML table per recipe (what it trains, its parameters and their
defaults, resources, and for a reproduction the published set-up it reproduces), typed on load
into :class:`~._model.Recipe` and friends, which check every value. Adding a recipe is adding a
table there; nothing here changes.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from importlib import resources
from typing import Any

from jupyter_starverse.errors import NotFoundError, did_you_mean

from ._model import Param, Recipe, Reproduction, Topology

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

__all__ = ["RECIPES", "SMALL_VLM_DATA", "SMALL_VLM_MODEL", "get_recipe", "load_recipes"]

_FILE = "recipes.toml"


def _param(item: Mapping[str, Any]) -> Param:
    return Param(item["name"], item["default"], item["kind"], item["help"], tuple(item.get("choices", ())))


def _params(entry: Mapping[str, Any], table: Mapping[str, Any]) -> tuple[Param, ...]:
    shared = {name: _param({"name": name, **spec}) for name, spec in table["params"].items()}
    out: list[Param] = []
    for item in entry["params"]:
        if item == "common":
            out += [shared[name] for name in table["common"]]
        elif isinstance(item, str):
            out.append(shared[item])
        else:
            out.append(_param(item))
    defaults = entry.get("defaults", {})
    unknown = set(defaults) - {p.name for p in out}
    if unknown:
        raise ValueError(f"{_FILE}: defaults for parameters the recipe does not have: {sorted(unknown)}")
    return tuple(Param(p.name, defaults.get(p.name, p.default), p.kind, p.help, p.choices) for p in out)


def _reproduction(entry: Mapping[str, Any], common: Mapping[str, Any]) -> Reproduction:
    merged = {k: v for k, v in common.items() if k != "data_format"} | dict(entry)
    published = merged.pop("published")
    return Reproduction(published=Topology(**published), **merged)


def load_recipes(table: Mapping[str, Any]) -> dict[str, Recipe]:
    """The recipes of a parsed catalog file, in its order (a malformed entry raises)."""
    out: dict[str, Recipe] = {}
    for name, entry in table["recipes"].items():
        fields = {k: v for k, v in entry.items() if k not in ("params", "defaults", "reproduction")}
        repro = entry.get("reproduction")
        if repro is not None:
            fields.setdefault("data_format", table["reproduction"]["data_format"])
            fields["reproduction"] = _reproduction(repro, table["reproduction"])
        if "templates" in fields:
            fields["templates"] = tuple(fields["templates"])
        out[name] = Recipe(name=name, params=_params(entry, table), **fields)
    return out


_TABLE = tomllib.loads(resources.files(__package__).joinpath(_FILE).read_text(encoding="utf-8"))
RECIPES: dict[str, Recipe] = load_recipes(_TABLE)
#: What ``--small`` of a reproduction trains on (``RecipeService.small_assets`` builds both offline).
SMALL_VLM_MODEL: str = _TABLE["reproduction"]["small_model"]
SMALL_VLM_DATA: str = _TABLE["reproduction"]["small_data"]


def get_recipe(name: str) -> Recipe:
    """The recipe ``name``; ``NotFoundError`` listing the recipes otherwise."""
    try:
        return RECIPES[name]
    except (KeyError, TypeError):
        raise NotFoundError(
            f"no recipe {name!r}",
            hint=f"{did_you_mean(str(name), RECIPES)}recipes: {', '.join(RECIPES)} (`starverse recipes ls`)",
        ) from None
