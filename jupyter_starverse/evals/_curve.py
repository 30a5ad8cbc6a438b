"""Reference curves (the classes live in the runtime: a training job checks its loss live)."""

from __future__ import annotations

from jupyter_starverse.runtime import CurveCheck, Departure, ReferenceCurve

__all__ = ["CurveCheck", "Departure", "ReferenceCurve"]
