"""Reference loss curves of reproductions, and how far a run's loss departs from one.

A curve file (``recipes/curves/RECIPE.json``) names its ``source`` and what kind of figures it
holds (``published`` per-step figures, ``published-endpoints`` when the source gives only the
first and last loss, or ``own-reference-run`` for a curve we recorded ourselves: never passed
off as published), the axis (``step``, ``tokens`` or ``fraction`` of the run) and the points.
:meth:`ReferenceCurve.check` holds a run's loss against it at the same step / tokens / fraction
(linear interpolation, never extrapolated) and lists where the relative gap exceeds the tolerance.
Inside a job, :class:`ReferenceWatch` (``STARVERSE_REFERENCE_CURVE``, set by reproduction recipes)
does the same for each logged loss and prints a warning when the run leaves the tolerance band
and a line when it comes back (not one line per step).

A curve is the full-size run's: a ``--small`` run (a toy model, random weights, generated data)
is no reproduction of it. Such a run is drawn beside the curve but not held against it
(``STARVERSE_REFERENCE_CHECK=draw`` in the job; ``held=False`` here): one line says so, no
departure is warned about, and a check lists its departures without calling them warnings.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from jupyter_starverse.errors import BadInputError, NotFoundError

__all__ = ["CURVES", "CurveCheck", "Departure", "ReferenceCurve", "ReferenceWatch", "reference_series"]

CURVES = Path(__file__).resolve().parent.parent / "recipes" / "curves"
KINDS = ("published", "published-endpoints", "own-reference-run")
AXES = ("step", "tokens", "fraction")


@dataclass(frozen=True)
class Departure:
    step: int
    x: float
    live: float
    reference: float

    @property
    def gap(self) -> float:
        return (self.live - self.reference) / self.reference if self.reference else float("inf")

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "gap": self.gap}


@dataclass(frozen=True)
class ReferenceCurve:
    recipe: str
    source: str
    kind: str
    x: str
    points: tuple[tuple[float, float], ...]
    tolerance: float = 0.1
    metric: str = "loss"

    @classmethod
    def load(cls, path_or_recipe: str | Path) -> ReferenceCurve:
        path = Path(path_or_recipe)
        if not path.suffix:
            path = CURVES / f"{path_or_recipe}.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError as e:
            known = ", ".join(sorted(p.stem for p in CURVES.glob("*.json"))) or "none"
            raise NotFoundError(f"no reference curve {str(path_or_recipe)!r}", hint=f"shipped curves: {known}") from e
        except ValueError as e:
            raise BadInputError(f"{path} is not JSON: {e}", field="reference", hint="see recipes/curves/") from e
        if data.get("kind") not in KINDS or data.get("x") not in AXES or not data.get("source"):
            raise BadInputError(
                f"{path}: a curve needs a source, kind in {KINDS} and x in {AXES}", field="reference",
                hint="see recipes/curves/cogvlm-stage1.json",
            )  # fmt: skip
        points = tuple(sorted((float(a), float(b)) for a, b in data["points"]))
        if len(points) < 2:
            raise BadInputError(f"{path}: a curve needs two points or more", field="reference", hint="add points")
        return cls(str(data.get("recipe", path.stem)), str(data["source"]), str(data["kind"]), str(data["x"]), points,
                   float(data.get("tolerance", 0.1)), str(data.get("metric", "loss")))  # fmt: skip

    def at(self, x: float) -> float | None:
        """The reference value at ``x`` (None outside the curve: never extrapolated)."""
        pts = self.points
        if x < pts[0][0] or x > pts[-1][0]:
            return None
        for (x0, y0), (x1, y1) in itertools.pairwise(pts):
            if x0 <= x <= x1:
                return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
        return None

    def x_of(self, step: int, *, total_steps: int | None = None, tokens: float | None = None) -> float | None:
        """Where ``step`` sits on the curve's axis (None when that axis is unknown for it)."""
        if self.x == "step":
            return float(step)
        if self.x == "tokens":
            return tokens
        return step / total_steps if total_steps else None

    def series(self, steps: Sequence[int], *, total_steps: int | None = None,
               tokens: Sequence[float | None] | None = None) -> list[tuple[int, float]]:  # fmt: skip
        """The reference value at each of ``steps`` (those the curve covers): the line a chart draws
        beside the live loss, at the same steps."""
        out = []
        for i, step in enumerate(steps):
            x = self.x_of(step, total_steps=total_steps, tokens=tokens[i] if tokens is not None else None)
            ref = self.at(x) if x is not None else None
            if ref is not None:
                out.append((int(step), ref))
        return out

    def check(
        self, live: Sequence[tuple[int, float, float | None]], *, total_steps: int | None = None,
        tolerance: float | None = None, held: bool = True,
    ) -> CurveCheck:  # fmt: skip
        """``live``: (step, loss, tokens seen or None). Compared at the curve's axis; ``held=False``
        (a ``--small`` run): the gaps are listed, not warned about."""
        tol = self.tolerance if tolerance is None else tolerance
        compared, out = 0, []
        for step, loss, tokens in live:
            x = self.x_of(step, total_steps=total_steps, tokens=tokens)
            ref = self.at(x) if x is not None else None
            if ref is None:
                continue
            compared += 1
            if ref and abs(loss - ref) / ref > tol:
                out.append(Departure(step, float(x or 0.0), loss, ref))
        return CurveCheck(self, tol, compared, tuple(out), held)


#: What a ``--small`` run is told about its reproduction's curve (once, in its log and its check).
NOT_HELD = ("a --small run (toy model) is drawn beside the full-size run's curve, not held against it: "
            "its departures are no finding")  # fmt: skip


@dataclass(frozen=True)
class CurveCheck:
    curve: ReferenceCurve
    tolerance: float
    compared: int
    departures: tuple[Departure, ...]
    held: bool = True  # False: a --small run, drawn beside the curve only

    def to_json(self) -> dict[str, Any]:
        c = self.curve
        return {"recipe": c.recipe, "source": c.source, "kind": c.kind, "x": c.x, "tolerance": self.tolerance,
                "compared": self.compared, "departures": [d.to_json() for d in self.departures],
                "held": self.held}  # fmt: skip

    @property
    def warnings(self) -> list[str]:
        if not self.held:
            return []
        return [
            f"step {d.step}: loss {d.live:.3f} departs from the reference {d.reference:.3f} by {d.gap:+.1%} "
            f"(tolerance {self.tolerance:.0%}; {self.curve.kind}: {self.curve.source[:80]})"
            for d in self.departures
        ]

    def __str__(self) -> str:
        head = (f"{self.curve.recipe}: {self.compared} points compared with the {self.curve.kind} curve "
                f"({self.curve.x} axis), {len(self.departures)} beyond {self.tolerance:.0%}")  # fmt: skip
        if not self.held:
            return f"{head}\n{self.curve.recipe}: {NOT_HELD}"
        return "\n".join([head, *self.warnings[:20]])

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(str(self))


class ReferenceWatch:
    """The live check of one job: ``see(step, loss, tokens)`` returns a line to print, or None."""

    def __init__(self, curve: ReferenceCurve, *, total_steps: int | None, held: bool = True) -> None:
        self.curve = curve
        self.total_steps = total_steps
        self.held = held
        self.departed = False
        self.told = False

    def see(self, step: int, loss: float, tokens: float | None = None) -> str | None:
        check = self.curve.check([(step, loss, tokens)], total_steps=self.total_steps)
        if not check.compared:
            return None
        if not self.held:  # a --small run: said once, never warned
            if self.told:
                return None
            self.told = True
            return f"reference curve {self.curve.recipe}: {NOT_HELD}"
        if check.departures and not self.departed:
            self.departed = True
            return f"warning: reference curve: {check.warnings[0]}"
        if not check.departures and self.departed:
            self.departed = False
            ref = self.curve.at(step / self.total_steps if self.curve.x == "fraction" and self.total_steps else step)
            return f"reference curve: step {step}: loss {loss:.3f} is back within {check.tolerance:.0%} of {ref:.3f}"
        return None


def reference_series(
    curve: str | None, steps: Sequence[int], *, total_steps: int | None = None
) -> tuple[ReferenceCurve, list[tuple[int, float]]] | None:
    """A job's reference curve (its ``STARVERSE_REFERENCE_CURVE``) at ``steps``, or None when it has
    none or the curve does not load (a chart then draws the live loss alone)."""
    if not curve:
        return None
    try:
        loaded = _load_cached(curve)
    except (BadInputError, NotFoundError):
        return None
    return loaded, loaded.series(steps, total_steps=total_steps)


@functools.lru_cache(maxsize=32)
def _load_cached(curve: str) -> ReferenceCurve:
    return ReferenceCurve.load(curve)
