"""``/jupyter-starverse/cost/*``: the price table, estimates, comparisons, meters, totals.

| verb | path                                                        | answer        |
|------|-------------------------------------------------------------|---------------|
| GET  | cost/prices                                                 | ``PriceTable``|
| GET  | cost/estimate?gpu=&cards=&hours=|duration=&billing=         | ``Estimate``  |
| GET  | cost/compare?gpu=&cards=&hours=|duration=&billing=&gpus=    | ``Comparison``|
| GET  | cost/mixed?pools=rtx4090:256,a100-80g:128&hours=|duration=&billing= | ``MixedPlan`` |
| GET  | cost/total[?user=]                                          | ``UserTotal`` |
| GET  | cost/jobs/ID[?backend=]                                     | ``Cost``      |
| POST | cost/preview  body ``{"spec": JobSpec, "hours"?, "duration"?}``| ``Preview``   |

``billing`` and ``gpus`` of ``compare`` are comma lists or ``all`` (default: every billing
mode, the one GPU type). Every bad parameter is a 400 with a hint.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from tornado import web

from jupyter_starverse.costs import MAX_SECONDS, Cost, Resources, parse_duration
from jupyter_starverse.errors import BadInputError
from jupyter_starverse.jobmodel import JobSpec

from ._base import StarverseHandler, parse_int

__all__ = ["routes"]

_MAX_CARDS = 4096 * 64  # nodes x cards per node of the largest JobSpec
_ID = r"(?P<job_id>[A-Za-z0-9][A-Za-z0-9._-]{0,127})"


_SECONDS_PER_HOUR = 3600
_MAX_HOURS = MAX_SECONDS // _SECONDS_PER_HOUR
_HOURS_HINT = f"give hours as a plain number between 0 and {_MAX_HOURS}, for example hours=4"


def _hours(value: object) -> Decimal:
    """Seconds in ``value`` hours; anything but a sane, finite, positive number is a 400."""
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "..."
    if isinstance(value, bool) or not isinstance(value, (str, int, float, Decimal)):
        raise BadInputError(f"hours={shown} is not a number", field="duration", hint=_HOURS_HINT)
    text = str(value).strip()
    if not text.isascii() or len(text) > 40:
        raise BadInputError(f"hours={shown} is not a number", field="duration", hint=_HOURS_HINT)
    try:
        hours = Decimal(text)
    except InvalidOperation:
        raise BadInputError(f"hours={shown} is not a number", field="duration", hint=_HOURS_HINT) from None
    # Compare before any arithmetic: 1e9999999 * 3600 overflows the decimal context.
    if hours.is_finite() and hours <= 0:
        raise BadInputError(f"hours={shown} must be positive", field="duration", hint=_HOURS_HINT)
    if not hours.is_finite() or hours > _MAX_HOURS:
        raise BadInputError(f"hours={shown} must be at most {_MAX_HOURS} (one year)", field="duration",
                            hint=_HOURS_HINT)  # fmt: skip
    return hours * _SECONDS_PER_HOUR


class _CostHandler(StarverseHandler):
    """Shared query parsing of the estimate and compare routes."""

    async def resources(self) -> Resources:
        gpu = self.query("gpu")
        if not gpu:
            mode = await self.run(lambda: self.client.mode)  # reads the mode file: off the loop
            gpu = mode.gpu_type if mode.kind == "gpu" and mode.gpu_type else "cpu"
        cards = parse_int(self.query("cards"), "cards", default=1, low=1, high=_MAX_CARDS)
        assert cards is not None
        return Resources(gpu, cards)

    def seconds(self) -> Decimal:
        hours, duration = self.query("hours"), self.query("duration")
        if hours and duration:
            raise BadInputError("give either hours or duration, not both", field="duration")
        if duration:
            return parse_duration(duration)
        if not hours:
            raise BadInputError("hours or duration is required", field="duration", hint="add ?hours=4 or ?duration=3d")
        return _hours(hours)

    def names(self, key: str) -> list[str] | None:
        raw = (self.query(key) or "").strip()
        if not raw or raw == "all":
            return None
        return [part.strip() for part in raw.split(",") if part.strip()]


class PreviewHandler(StarverseHandler):
    """What a spec will cost, before it is launched (per-hour price, estimate, cap)."""

    @web.authenticated
    async def post(self) -> None:
        body = self.json_body()
        unknown = sorted(set(body) - {"spec", "hours", "duration"})
        if unknown or not isinstance(body.get("spec"), dict):
            raise BadInputError(
                "expected a JSON object with 'spec' (a JobSpec) and optionally 'hours' or 'duration'",
                field=unknown[0] if unknown else "spec",
            )
        spec = JobSpec.from_json(body["spec"])
        hours, duration = body.get("hours"), body.get("duration")
        if hours is not None and duration is not None:
            raise BadInputError("give either hours or duration, not both", field="duration")
        seconds: Decimal | None = None
        if duration is not None:
            seconds = parse_duration(str(duration))
        elif hours is not None:
            seconds = _hours(hours)
        self.finish_json(await self.run(self.client.costs.preview, spec, seconds))


class PricesHandler(StarverseHandler):
    @web.authenticated
    async def get(self) -> None:
        self.finish_json(await self.run(lambda: self.client.costs.prices))


class EstimateHandler(_CostHandler):
    @web.authenticated
    async def get(self) -> None:
        res, seconds, billing = await self.resources(), self.seconds(), self.query("billing") or "on_demand"
        self.finish_json(await self.run(self.client.costs.estimate, res, seconds, billing))


class CompareHandler(_CostHandler):
    @web.authenticated
    async def get(self) -> None:
        res, seconds = await self.resources(), self.seconds()
        billings, gpus = self.names("billing"), self.names("gpus")
        if (self.query("gpus") or "").strip() == "all":
            gpus = ["all"]
        elif gpus and res.accelerator not in gpus:
            gpus = [res.accelerator, *gpus]
        costs = self.client.costs
        self.finish_json(await self.run(lambda: costs.compare(res, seconds, billings=billings, accelerators=gpus)))


class MixedHandler(_CostHandler):
    """A plan across GPU types, each option priced for the same work (``cost estimate --mixed``)."""

    @web.authenticated
    async def get(self) -> None:
        pools, seconds, billing = self.query("pools") or "", self.seconds(), self.query("billing") or "on_demand"
        self.finish_json(await self.run(self.client.costs.mixed, pools, seconds, billing))


class TotalHandler(StarverseHandler):
    @web.authenticated
    async def get(self) -> None:
        self.finish_json(await self.run(self.client.cost_total, self.query("user") or None))


class JobCostHandler(StarverseHandler):
    @web.authenticated
    async def get(self, job_id: str) -> None:
        client, backend = self.client, self.query("backend") or None

        def meter() -> Cost:
            return client.costs.meter(client.attach(job_id, backend=backend))

        self.finish_json(await self.run(meter))


routes: list[tuple[str, type[StarverseHandler]]] = [
    (r"cost/prices", PricesHandler),
    (r"cost/estimate", EstimateHandler),
    (r"cost/compare", CompareHandler),
    (r"cost/mixed", MixedHandler),
    (r"cost/total", TotalHandler),
    (rf"cost/jobs/{_ID}", JobCostHandler),
    (r"cost/preview", PreviewHandler),
]
