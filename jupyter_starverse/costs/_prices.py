"""The price table: shipped as data (``prices.json``), replaceable by the operator.

File format (JSON; every amount may be a string or a number and is read as an exact decimal)::

    {
      "currency": "CNY",                    # ISO code, 3 letters
      "decimals": 2,                        # minor unit used for rounding (optional, 2)
      "gpus": {"rtx4090": {"on_demand": "1.8", "spot": ["0.4", "1.2"]}, ...},
      "cpu_node": {"on_demand": "0.1", "spot": ["0.04", "0.08"]},
      "packages": {"daily": {"hours": 24, "discount": "0.30"},
                   "weekly": {"hours": 168, "discount": "0.30"}}
    }

GPU prices are per card-hour, the CPU price per node-hour. ``spot`` is a range
``[low, high]``; leave it out where spot capacity is not sold (asking for a spot estimate
is then an error). A package sells ``hours`` of one card at ``on_demand x (1 - discount)``.
Keys starting with ``_`` are comments. Any other unknown key is an error, so a typo never
silently falls back to a default price. A price that is not in the table is an error,
never 0; an operator who wants free cards writes ``"0"`` explicitly.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import Any

from jupyter_starverse._format import format_money
from jupyter_starverse._settings import Settings
from jupyter_starverse.errors import BadInputError, did_you_mean

from ._html import table_html
from ._money import parse_money

__all__ = ["PACKAGE_BILLINGS", "GpuPrice", "Package", "PriceTable", "load_price_table", "parse_price_table"]

#: Billing modes sold as packages (the others are per second).
PACKAGE_BILLINGS = ("daily", "weekly")

_CURRENCY_RE = re.compile(r"^[A-Z]{3}$")
_TYPE_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
#: No card-hour costs more; a larger figure is a typo (and would overflow exact arithmetic).
_MAX_PRICE = Decimal(10) ** 9
_TOP_KEYS = ("currency", "decimals", "gpus", "cpu_node", "packages")


def _bad(source: str, what: str, hint: str | None = None) -> BadInputError:
    return BadInputError(
        f"price table {source}: {what}",
        field="prices",
        hint=hint or "fix the price file (STARVERSE_PRICES / the server's prices_file) or unset it",
    )


def _check_keys(data: dict[str, Any], known: tuple[str, ...], source: str, where: str) -> None:
    unknown = sorted(k for k in data if not str(k).startswith("_") and k not in known)
    if unknown:
        raise _bad(
            source, f"unknown key(s) {', '.join(map(repr, unknown))} in {where}", f"known keys: {', '.join(known)}"
        )


def _amount(value: object, source: str, where: str) -> Decimal:
    try:
        out = parse_money(value, field=where)
    except BadInputError as e:
        raise _bad(source, e.message) from None
    if out > _MAX_PRICE:
        raise _bad(source, f"{where} = {value} is not a plausible price (at most {_MAX_PRICE:,} per hour)")
    return out


def valid_currency(value: str, *, field: str = "currency") -> str:
    """Upper-cased 3-letter code, or :class:`BadInputError`."""
    code = str(value).strip().upper()
    if not _CURRENCY_RE.match(code):
        raise BadInputError(
            f"{field}: {value!r} is not a currency code", field=field, hint="use a 3-letter code such as CNY or USD"
        )
    return code


@dataclass(frozen=True)
class GpuPrice:
    """Price of one card-hour (GPU) or one node-hour (CPU): on demand, and the spot range if sold."""

    on_demand: Decimal
    spot: tuple[Decimal, Decimal] | None = None

    @classmethod
    def parse(cls, data: object, *, source: str, where: str) -> GpuPrice:
        if not isinstance(data, dict):
            raise _bad(source, f'{where} must be an object like {{"on_demand": "1.8"}}')
        _check_keys(data, ("on_demand", "spot"), source, where)
        if "on_demand" not in data:
            raise _bad(source, f"{where} has no 'on_demand' price")
        on_demand = _amount(data["on_demand"], source, f"{where}.on_demand")
        raw = data.get("spot")
        if raw is None:
            return cls(on_demand)
        if not isinstance(raw, list) or len(raw) != 2:
            raise _bad(source, f"{where}.spot must be a list [low, high]")
        low, high = _amount(raw[0], source, f"{where}.spot[0]"), _amount(raw[1], source, f"{where}.spot[1]")
        if low > high:
            raise _bad(source, f"{where}.spot low {low} is above high {high}")
        return cls(on_demand, (low, high))

    def to_json(self) -> dict[str, Any]:
        return {"on_demand": str(self.on_demand), "spot": [str(p) for p in self.spot] if self.spot else None}


@dataclass(frozen=True)
class Package:
    """A prepaid block of ``hours`` per card at ``discount`` off the on-demand rate."""

    name: str
    hours: int
    discount: Decimal

    @property
    def seconds(self) -> int:
        return self.hours * 3600

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "hours": self.hours, "discount": str(self.discount)}


@dataclass(frozen=True)
class PriceTable:
    """Prices per GPU type and for CPU nodes, in one currency. Build with :func:`parse_price_table`."""

    currency: str
    gpus: dict[str, GpuPrice]
    cpu_node: GpuPrice
    packages: dict[str, Package] = field(default_factory=dict)
    decimals: int = 2
    source: str = "shipped"

    @classmethod
    def parse(cls, data: Any, *, source: str) -> PriceTable:
        """Validate a decoded JSON document (see the module docstring for the format)."""
        return parse_price_table(data, source=source)

    @property
    def accelerators(self) -> tuple[str, ...]:
        """Every GPU type priced, sorted, then ``cpu``."""
        return (*sorted(self.gpus), "cpu")

    def price(self, accelerator: str) -> GpuPrice:
        """Price for a GPU type (or ``cpu``); an unknown type is an error, never 0."""
        key = str(accelerator).strip().lower()
        if key == "cpu":
            return self.cpu_node
        try:
            return self.gpus[key]
        except KeyError:
            raise BadInputError(
                f"no price for GPU type {accelerator!r} in the {self.source} price table",
                field="accelerator",
                hint=f"{did_you_mean(key, self.accelerators)}known types: {', '.join(self.accelerators)}; "
                "an operator can add it to the price file",
            ) from None

    def package(self, billing: str) -> Package:
        """The package sold for ``billing`` (``daily``/``weekly``); missing is an error."""
        try:
            return self.packages[billing]
        except KeyError:
            sold = ", ".join(self.packages) or "none"
            raise BadInputError(
                f"the {self.source} price table sells no {billing!r} package (sold: {sold})",
                field="billing",
                hint="choose another billing mode or add the package to the price file",
            ) from None

    def with_currency(self, currency: str) -> PriceTable:
        """The same figures labelled with another currency (an operator override; no conversion)."""
        return replace(self, currency=valid_currency(currency))

    def to_json(self) -> dict[str, Any]:
        return {
            "currency": self.currency,
            "decimals": self.decimals,
            "source": self.source,
            "gpus": {k: v.to_json() for k, v in sorted(self.gpus.items())},
            "cpu_node": self.cpu_node.to_json(),
            "packages": {k: v.to_json() for k, v in self.packages.items()},
        }

    def _rows(self) -> list[tuple[str, ...]]:
        rows = []
        for name in self.accelerators:
            p = self.price(name)
            spot = f"{format_money(p.spot[0])}-{format_money(p.spot[1])}" if p.spot else "-"
            pkgs = (format_money(p.on_demand * (1 - pkg.discount)) for pkg in self.packages.values())
            rows.append((name, "node-h" if name == "cpu" else "card-h", format_money(p.on_demand), spot, *pkgs))
        return rows

    def _caption(self) -> str:
        packages = ", ".join(f"{p.name} {p.hours}h at {p.discount * 100:.0f}% off" for p in self.packages.values())
        return f"prices in {self.currency} per hour ({self.source}); packages: {packages or 'none'}"

    def _repr_html_(self) -> str:
        header = ("type", "unit", "on demand", "spot", *(f"{p} pkg" for p in self.packages))
        return table_html(header, self._rows(), caption=self._caption())

    def __str__(self) -> str:
        rows = [("type", "unit", "on demand", "spot", *(f"{p} pkg" for p in self.packages)), *self._rows()]
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in rows]
        lines.append(self._caption())
        return "\n".join(lines)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(str(self))


def parse_price_table(data: Any, *, source: str) -> PriceTable:
    """Validate a decoded price document; every problem is a :class:`BadInputError` naming the key."""
    if not isinstance(data, dict):
        raise _bad(source, "expected a JSON object at the top")
    _check_keys(data, _TOP_KEYS, source, "the top level")
    if not isinstance(data.get("currency"), str):
        raise _bad(source, "'currency' is missing", 'add for example "currency": "CNY"')
    try:
        currency = valid_currency(data["currency"])
    except BadInputError as e:
        raise _bad(source, e.message, e.hint) from None
    decimals = data.get("decimals", 2)
    if isinstance(decimals, bool) or not isinstance(decimals, int) or not 0 <= decimals <= 4:
        raise _bad(source, f"'decimals' must be a whole number from 0 to 4, got {decimals!r}")
    gpus_raw = data.get("gpus")
    if not isinstance(gpus_raw, dict) or not gpus_raw:
        raise _bad(
            source, "'gpus' must map GPU types to prices", 'for example "gpus": {"rtx4090": {"on_demand": "1.8"}}'
        )
    gpus: dict[str, GpuPrice] = {}
    for name, value in gpus_raw.items():
        key = str(name).strip().lower()
        if not _TYPE_RE.match(key) or key == "cpu":
            raise _bad(source, f"{name!r} is not a valid GPU type name (lower-case letters, digits, '.', '_', '-')")
        gpus[key] = GpuPrice.parse(value, source=source, where=f"gpus.{name}")
    cpu = GpuPrice.parse(data.get("cpu_node"), source=source, where="cpu_node")
    packages_raw = data.get("packages", {})
    if not isinstance(packages_raw, dict):
        raise _bad(source, "'packages' must be an object")
    packages: dict[str, Package] = {}
    for name, pkg in packages_raw.items():
        if name not in PACKAGE_BILLINGS:
            raise _bad(source, f"unknown package {name!r}", f"packages can be: {', '.join(PACKAGE_BILLINGS)}")
        if not isinstance(pkg, dict):
            raise _bad(source, f"packages.{name} must be an object with 'hours' and 'discount'")
        _check_keys(pkg, ("hours", "discount"), source, f"packages.{name}")
        hours = pkg.get("hours")
        if isinstance(hours, bool) or not isinstance(hours, int) or not 1 <= hours <= 8784:
            raise _bad(source, f"packages.{name}.hours must be a whole number of hours (1 to 8784), got {hours!r}")
        if "discount" not in pkg:
            raise _bad(source, f"packages.{name} has no 'discount'", 'write e.g. "discount": "0.30" for 30% off')
        discount = _amount(pkg["discount"], source, f"packages.{name}.discount")
        if discount >= 1:
            raise _bad(source, f"packages.{name}.discount must be below 1 (0.30 means 30% off), got {discount}")
        packages[name] = Package(name, hours, discount)
    return PriceTable(currency, gpus, cpu, packages, decimals, source)


def _read(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInputError(
            f"price file {path} does not exist",
            field="prices",
            hint="fix STARVERSE_PRICES (or prices_file) or unset it",
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise BadInputError(
            f"price file {path} cannot be read: {e}", field="prices", hint="check the file and its permissions"
        ) from None
    try:
        # parse_float=Decimal keeps 1.8 exact; the constants hook rejects NaN/Infinity.
        return json.loads(text, parse_float=Decimal, parse_constant=_no_constant)
    except ValueError as e:
        raise BadInputError(
            f"price file {path} is not valid JSON: {e}", field="prices", hint="fix the JSON syntax"
        ) from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a price")


def load_price_table(settings: Settings) -> PriceTable:
    """The operator's table (``settings.prices_file``) or the shipped one, with the currency override."""
    if settings.prices_file is not None:
        path = Path(settings.prices_file)
        table = parse_price_table(_read(path), source=str(path))
    else:
        text = resources.files(__package__).joinpath("prices.json").read_text(encoding="utf-8")
        table = parse_price_table(json.loads(text, parse_float=Decimal), source="shipped")
    if settings.currency:
        table = table.with_currency(settings.currency)
    return table
