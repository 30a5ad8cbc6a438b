"""What a switch will do and what it did: plans and results the front doors show."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from .._format import ShownAsText, format_price_per_hour, html_table, pretty_text

if TYPE_CHECKING:
    from ._mode import Mode
    from ._switch import SwitchOutcome

__all__ = [
    "KernelSwitchReport",
    "ModeStatus",
    "PriceChange",
    "RestoreReport",
    "SavedState",
    "SwitchPlan",
    "SwitchResult",
]


@dataclass(frozen=True)
class SavedState(ShownAsText):
    """A saved kernel namespace waiting on disk to be restored.

    ``not_kept`` maps each name that could not be saved to the reason, in words.
    """

    id: str
    path: str
    created: float
    names: tuple[str, ...]
    not_kept: dict[str, str] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    from_mode: str = ""
    to_mode: str = ""
    kernel_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "path": self.path,
            "created": self.created,
            "names": list(self.names),
            "not_kept": dict(self.not_kept),
            "notes": dict(self.notes),
            "from_mode": self.from_mode,
            "to_mode": self.to_mode,
            "kernel_id": self.kernel_id,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SavedState:
        return cls(
            id=str(data["id"]),
            path=str(data["path"]),
            created=float(data["created"]),
            names=tuple(data.get("names", ())),
            not_kept=dict(data.get("not_kept", {})),
            notes=dict(data.get("notes", {})),
            from_mode=str(data.get("from_mode", "")),
            to_mode=str(data.get("to_mode", "")),
            kernel_id=data.get("kernel_id"),
        )

    def __str__(self) -> str:
        lines = [f"saved {len(self.names)} name(s): {', '.join(self.names) or '-'}"]
        lines += [f"  {name}: {note}" for name, note in self.notes.items()]
        if self.not_kept:
            lines.append("not kept:")
            lines += [f"  {name}: {why}" for name, why in self.not_kept.items()]
        return "\n".join(lines)


@dataclass(frozen=True)
class RestoreReport(ShownAsText):
    """What a restore brought back into the kernel and what it could not."""

    state_id: str
    restored: tuple[str, ...]
    failed: dict[str, str] = field(default_factory=dict)
    not_kept: dict[str, str] = field(default_factory=dict)
    kept_on_disk: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "state_id": self.state_id,
            "restored": list(self.restored),
            "failed": dict(self.failed),
            "not_kept": dict(self.not_kept),
            "kept_on_disk": self.kept_on_disk,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RestoreReport:
        return cls(
            state_id=str(data["state_id"]),
            restored=tuple(data.get("restored", ())),
            failed=dict(data.get("failed", {})),
            not_kept=dict(data.get("not_kept", {})),
            kept_on_disk=data.get("kept_on_disk"),
        )

    def __str__(self) -> str:
        lines = [f"restored {len(self.restored)} name(s): {', '.join(self.restored) or '-'}"]
        if self.failed:
            lines.append("could not restore:")
            lines += [f"  {name}: {why}" for name, why in self.failed.items()]
        if self.not_kept:
            lines.append("not kept across the switch:")
            lines += [f"  {name}: {why}" for name, why in self.not_kept.items()]
        if self.kept_on_disk:
            lines.append(f"the saved state stays at {self.kept_on_disk}")
        return "\n".join(lines)


@dataclass(frozen=True)
class PriceChange:
    """Price per hour of the workspace before and after a switch (``None`` if unknown)."""

    currency: str
    before: Decimal | None
    after: Decimal | None

    @property
    def difference(self) -> Decimal | None:
        if self.before is None or self.after is None:
            return None
        return self.after - self.before

    def to_json(self) -> dict[str, Any]:
        diff = self.difference
        return {
            "currency": self.currency,
            "before_per_hour": None if self.before is None else str(self.before),
            "after_per_hour": None if self.after is None else str(self.after),
            "difference_per_hour": None if diff is None else str(diff),
        }

    def __str__(self) -> str:
        if self.difference is None:
            return "price difference unknown"
        sign = "+" if self.difference >= 0 else "-"
        before, after = (format_price_per_hour(x, self.currency) for x in (self.before, self.after))
        return f"{before} -> {after} ({sign}{format_price_per_hour(abs(self.difference), self.currency)})"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))


@dataclass(frozen=True)
class SwitchPlan(ShownAsText):
    """A checked switch, not yet made: from which mode to which, where, at what price."""

    current: Mode
    target: Mode
    where: str
    price: PriceChange
    warnings: tuple[str, ...] = ()

    @property
    def changes(self) -> bool:
        return self.current != self.target

    def to_json(self) -> dict[str, Any]:
        return {
            "current": self.current.to_json(),
            "target": self.target.to_json(),
            "where": self.where,
            "price": self.price.to_json(),
            "changes": self.changes,
            "warnings": list(self.warnings),
        }

    def __str__(self) -> str:
        lines = [f"{self.current} -> {self.target} ({self.where} workspace)", f"price: {self.price}"]
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        rows = [("switch", f"{self.current} -> {self.target}"), ("where", self.where), ("price", str(self.price))]
        rows += [("warning", w) for w in self.warnings]
        return html_table(("", ""), rows)


@dataclass(frozen=True)
class SwitchResult(ShownAsText):
    """A switch that was made: the outcome and what happened to each kernel's variables."""

    plan: SwitchPlan
    outcome: SwitchOutcome | None
    kernels: tuple[KernelSwitchReport, ...] = ()
    saved: tuple[SavedState, ...] = ()
    message: str = ""
    restart_requested: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "plan": self.plan.to_json(),
            "mode": self.plan.target.to_json(),
            "price": self.plan.price.to_json(),
            "outcome": self.outcome.to_json() if self.outcome else None,
            "kernels": [k.to_json() for k in self.kernels],
            "saved": [s.to_json() for s in self.saved],
            "message": self.message,
            "restart_requested": self.restart_requested,
        }

    def __str__(self) -> str:
        if not self.plan.changes:
            return "\n".join([f"already in {self.plan.target} mode", *(f"warning: {w}" for w in self.plan.warnings)])
        lines = [f"switched to {self.plan.target} ({self.plan.where}); price {self.plan.price}"]
        if self.outcome:
            lines.append(self.outcome.action)
        lines += [str(s) for s in self.saved]
        lines += [str(k) for k in self.kernels]
        if self.message:
            lines.append(self.message)
        lines += [f"warning: {w}" for w in self.plan.warnings]
        return "\n".join(lines)


@dataclass(frozen=True)
class ModeStatus(ShownAsText):
    """What ``GET /mode``, ``starverse mode`` and the status bar show."""

    mode: Mode
    where: str
    currency: str
    price_per_hour: Decimal | None
    gpu_types: tuple[str, ...]
    saved: tuple[SavedState, ...] = ()
    last_restore: RestoreReport | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode.to_json(),
            "where": self.where,
            "currency": self.currency,
            "price_per_hour": None if self.price_per_hour is None else str(self.price_per_hour),
            "gpu_types": list(self.gpu_types),
            "saved": [s.to_json() for s in self.saved],
            "last_restore": self.last_restore.to_json() if self.last_restore else None,
        }

    def __str__(self) -> str:
        price = format_price_per_hour(self.price_per_hour, self.currency)
        lines = [f"mode   {self.mode}", f"where  {self.where}", f"price  {price}"]
        for state in self.saved:
            lines.append(f"saved state {state.id} (kernel {state.kernel_id or '-'}): {', '.join(state.names) or '-'}")
            lines.append(f"  restore it with `%sv mode restore {state.id}`")
        return "\n".join(lines)


@dataclass(frozen=True)
class KernelSwitchReport(ShownAsText):
    """One kernel's switch: what was saved, what came back, or why it stopped."""

    kernel_id: str
    saved: SavedState
    restore: RestoreReport | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel_id": self.kernel_id,
            "saved": self.saved.to_json(),
            "restore": self.restore.to_json() if self.restore else None,
            "error": self.error,
        }

    def __str__(self) -> str:
        lines = [f"kernel {self.kernel_id}:", str(self.restore or self.saved)]
        if self.error:
            lines.append(f"error: {self.error}")
        return "\n".join(lines)
