"""A plan across GPU types ("256 x 4090 + 128 x A100 for 12 days"): each option's cost and time side by side.

The work of the plan is what its pools do in the given time when each works at its own pace:
``sum(cards x sustained TFLOPS)`` over the duration. Every option is priced for doing that same
work (money through :func:`estimate`: exact, per-second or packages, spot ranges):

``pool``
    One pool alone on its share of the work, for the whole duration (a stage or shard of its own).
``split``
    The mixed plan as it can run truthfully: a stage (or a shard of the data) per pool, each a job of
    one GPU type, sized to the pool's throughput; they run at the same time and end together.
``one job``
    One synchronous data-parallel job over both pools: every step waits for the slowest card (and
    the cards' memory is the smallest pool's), so every card works at the slowest type's pace and the
    same work takes longer, while every card is billed.
``single``
    All the cards (the plan's total count) of one type, for the same work.

Throughput per type: :data:`THROUGHPUT` (published dense BF16 tensor peaks with FP32 accumulation,
and the share of it a multi-node LLM run sustains on that type's usual interconnect).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from jupyter_starverse.errors import BadInputError
from jupyter_starverse.jobmodel import JobSpec

from ._estimate import Estimate, Resources, check_billing, estimate
from ._html import table_html
from ._money import MAX_SECONDS, DurationLike, billable_seconds, fmt_money, fmt_seconds
from ._prices import PriceTable

__all__ = [
    "THROUGHPUT",
    "GpuThroughput",
    "MixedOption",
    "MixedPlan",
    "MixedStage",
    "mixed_stages",
    "parse_pools",
    "plan_mixed",
    "pool_shape",
    "work_shares",
]


@dataclass(frozen=True)
class GpuThroughput:
    """What one card of a type does for training: peak dense BF16 TFLOPS and the share sustained at scale."""

    peak_tflops: float
    sustained: float  # model FLOPs utilisation of a multi-node run on the type's usual hosts
    memory_gib: int
    interconnect: str

    @property
    def tflops(self) -> float:
        """Sustained TFLOPS of one card."""
        return self.peak_tflops * self.sustained


#: dense BF16 (FP32 accumulate) peaks from the vendors' data sheets; ``sustained``: NVLink + InfiniBand
#: hosts keep ~45 % at scale, PCIe-only cards without peer-to-peer (GeForce) ~30 %, PCIe data-centre cards ~35 %
THROUGHPUT: dict[str, GpuThroughput] = {
    "rtx4090": GpuThroughput(165.2, 0.30, 24, "PCIe 4.0, no NVLink / P2P"),
    "l40s": GpuThroughput(362.1, 0.35, 48, "PCIe 4.0, no NVLink"),
    "a100-40g": GpuThroughput(312.0, 0.45, 40, "NVLink 600 GB/s + InfiniBand"),
    "a100-80g": GpuThroughput(312.0, 0.45, 80, "NVLink 600 GB/s + InfiniBand"),
    "h100-80g": GpuThroughput(989.4, 0.45, 80, "NVLink 900 GB/s + InfiniBand"),
}


def pool_shape(pool: Resources, per_node: int = 8) -> tuple[int, int]:
    """(nodes, GPUs per node) of a pool as one job: ``per_node`` GPUs a node, or the largest divisor below."""
    per = min(per_node, pool.count)
    while pool.count % per:
        per -= 1
    return pool.count // per, per


def launch_options(pool: Resources, per_node: int = 8) -> str:
    """``--gpu rtx4090 --nodes 32 --gpus-per-node 8``: a pool as one job's shape."""
    nodes, per = pool_shape(pool, per_node)
    return f"--gpu {pool.accelerator} --nodes {nodes} --gpus-per-node {per}"


def work_shares(pools: tuple[Resources, ...]) -> tuple[float, ...]:
    """Each pool's share of the plan's work: its cards x sustained TFLOPS over the plan's."""
    rates = [p.count * throughput(p.accelerator).tflops for p in pools]
    return tuple(r / sum(rates) for r in rates)


@dataclass(frozen=True)
class MixedStage:
    """One pool's job of a split plan: the spec shaped for the pool, and its share of the work."""

    index: int
    pool: Resources
    share: float
    spec: JobSpec

    @property
    def label(self) -> str:
        nodes, per = pool_shape(self.pool)
        return (
            f"stage {self.index + 1}: {self.pool.accelerator} pool, {self.pool.count} cards = {nodes} node(s) x {per}, "
            f"{self.share * 100:.0f}% of the work (job {self.spec.name})"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "accelerator": self.pool.accelerator,
            "cards": self.pool.count,
            "share": round(self.share, 6),
            "name": self.spec.name,
            "nodes": self.spec.nodes,
            "procs_per_node": self.spec.procs_per_node,
        }


def mixed_stages(spec: JobSpec, pools: tuple[Resources, ...]) -> tuple[MixedStage, ...]:
    """The split plan as jobs: ``spec`` once per pool, of that GPU type and shape, named and kept
    apart per pool (``NAME-TYPE``, its own experiment: each has its own world size and checkpoints),
    told its place by ``STARVERSE_MIXED_STAGE`` / ``STARVERSE_MIXED_STAGES`` / ``STARVERSE_MIXED_SHARE``
    (the data shard or stage it takes is the script's choice)."""
    stages = []
    plan = ",".join(f"{p.accelerator}:{p.count}" for p in pools)
    for i, (pool, share) in enumerate(zip(pools, work_shares(pools), strict=True)):
        nodes, per = pool_shape(pool)
        env = {
            **spec.env,
            "STARVERSE_MIXED_PLAN": plan,
            "STARVERSE_MIXED_STAGE": str(i),
            "STARVERSE_MIXED_STAGES": str(len(pools)),
            "STARVERSE_MIXED_SHARE": f"{share:.6f}",
        }
        stage_spec = spec.replace(
            name=f"{spec.name[: 62 - len(pool.accelerator)]}-{pool.accelerator}",
            display_name=None,
            experiment=f"{spec.experiment_name[: 62 - len(pool.accelerator)]}-{pool.accelerator}",
            accelerator=pool.accelerator,
            nodes=nodes,
            procs_per_node=per,
            env=env,
        )
        stages.append(MixedStage(i, pool, share, stage_spec))
    return tuple(stages)


def throughput(accelerator: str) -> GpuThroughput:
    found = THROUGHPUT.get(accelerator)
    if found is None:
        raise BadInputError(
            f"no throughput figures for {accelerator!r}",
            field="mixed",
            hint=f"plan with GPU types of the throughput table: {', '.join(sorted(THROUGHPUT))}",
        )
    return found


def parse_pools(text: str | list[str] | tuple[str, ...]) -> tuple[Resources, ...]:
    """``rtx4090:256,a100-80g:128`` as pools (two or more, each type once)."""
    items = [p for part in ([text] if isinstance(text, str) else text) for p in str(part).split(",") if p.strip()]
    pools: list[Resources] = []
    for item in items:
        name, sep, count = item.strip().partition(":")
        if not sep or not count.strip().isdigit():
            raise BadInputError(
                f"pool {item.strip()!r} is not TYPE:CARDS", field="mixed", hint="e.g. --mixed rtx4090:256,a100-80g:128"
            )
        pools.append(Resources(name, int(count)))
    names = [p.accelerator for p in pools]
    if len(pools) < 2 or len(set(names)) != len(names):
        raise BadInputError(
            "a mixed plan needs two or more pools of different GPU types",
            field="mixed",
            hint="e.g. --mixed rtx4090:256,a100-80g:128 (one type: cost estimate --gpu TYPE --cards N)",
        )
    for pool in pools:
        if pool.unit != "card":
            raise BadInputError("a mixed plan is of GPU pools", field="mixed", hint="leave cpu out of --mixed")
        throughput(pool.accelerator)
    return tuple(pools)


@dataclass(frozen=True)
class MixedOption:
    """One way to do the plan's work: its pools, how long it takes and what it costs."""

    kind: str  # pool | split | one job | single
    label: str
    pools: tuple[Resources, ...]
    seconds: int
    work_share: float  # of the plan's work this option does (1.0 but for a pool's own share)
    estimates: tuple[Estimate, ...]
    note: str = ""

    @property
    def low(self) -> Decimal:
        return sum((e.low for e in self.estimates), Decimal(0))

    @property
    def high(self) -> Decimal:
        return sum((e.high for e in self.estimates), Decimal(0))

    @property
    def cards(self) -> int:
        return sum(p.count for p in self.pools)

    @property
    def launches(self) -> tuple[str, ...]:
        """The jobs of this option, one per pool, as ``starverse launch`` options (8 GPUs per node)."""
        if self.kind == "one job":
            return ()
        return tuple(launch_options(p) for p in self.pools)

    def figure(self, currency: str) -> str:
        if self.low != self.high:
            return f"{self.low:,} - {fmt_money(self.high, currency)}"
        return fmt_money(self.high, currency)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "label": self.label,
            "pools": [{"accelerator": p.accelerator, "cards": p.count} for p in self.pools],
            "cards": self.cards,
            "seconds": self.seconds,
            "work_share": round(self.work_share, 6),
            "low": str(self.low),
            "high": str(self.high),
            "estimates": [e.to_json() for e in self.estimates],
            "launches": list(self.launches),
            "note": self.note,
        }


@dataclass(frozen=True)
class MixedPlan:
    """Every option of a mixed plan, priced for the same work; ``recommended``: the split plan."""

    pools: tuple[Resources, ...]
    seconds: int
    billing: str
    currency: str
    work_eflop: float  # the plan's work, 10^18 FLOPs sustained
    options: tuple[MixedOption, ...]

    @property
    def recommended(self) -> MixedOption:
        return next(o for o in self.options if o.kind == "split")

    def to_json(self) -> dict[str, Any]:
        return {
            "pools": [{"accelerator": p.accelerator, "cards": p.count} for p in self.pools],
            "seconds": self.seconds,
            "billing": self.billing,
            "currency": self.currency,
            "work_eflop": round(self.work_eflop, 3),
            "options": [o.to_json() for o in self.options],
            "recommended": self.recommended.label,
            "throughput": {
                p.accelerator: {
                    "peak_tflops": throughput(p.accelerator).peak_tflops,
                    "sustained": throughput(p.accelerator).sustained,
                    "memory_gib": throughput(p.accelerator).memory_gib,
                }
                for p in self.pools
            },
        }

    def _rows(self) -> list[tuple[str, str, str, str, str]]:
        return [
            (o.label, str(o.cards), fmt_seconds(o.seconds), f"{o.work_share * 100:.0f}%", o.figure(self.currency))
            for o in self.options
        ]

    def __str__(self) -> str:
        head = " + ".join(str(p) for p in self.pools)
        table = [("option", "cards", "time", "work", f"cost ({self.billing})"), *self._rows()]
        widths = [max(len(r[i]) for r in table) for i in range(5)]
        lines = [f"{head} for {fmt_seconds(self.seconds)}: {self.work_eflop:,.0f} EFLOP of training work"]
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table]
        lines += [f"  {o.label}: {o.note}" for o in self.options if o.note and o.kind != "pool"]
        best = self.recommended
        lines.append(f"plan: {best.label}, {fmt_seconds(best.seconds)}, {best.figure(self.currency)}; its jobs:")
        shares = [o.work_share for o in self.options if o.kind == "pool"]
        lines += [
            f"  starverse launch SCRIPT {shape}  # {share * 100:.0f}% of the work (its stage or shard)"
            for shape, share in zip(best.launches, shares, strict=True)
        ]
        return "\n".join(lines)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(str(self))

    def _repr_html_(self) -> str:
        rows = self._rows()
        mark = self.options.index(self.recommended)
        caption = f"the same {self.work_eflop:,.0f} EFLOP of work; the plan in bold"
        return table_html(("option", "cards", "time", "work", "cost"), rows, mark=mark, caption=caption)


def plan_mixed(pools: tuple[Resources, ...], duration: DurationLike, billing: str, *, table: PriceTable) -> MixedPlan:
    """Price the mixed plan ``pools`` for ``duration`` against its alternatives (see the module doc)."""
    mode = check_billing(billing)
    seconds = billable_seconds(duration)
    rates = {p.accelerator: p.count * throughput(p.accelerator).tflops for p in pools}
    total_rate = sum(rates.values())  # TFLOPS sustained of the plan
    work = total_rate * seconds  # TFLOP

    def price(res: Resources, secs: int) -> Estimate:
        return estimate(res, secs, mode, table=table)

    def seconds_for(rate: float) -> int:
        secs = math.ceil(work / rate)
        if secs > MAX_SECONDS:
            raise BadInputError(
                f"an option of this plan would run {fmt_seconds(secs)}, longer than a year",
                field="duration",
                hint="plan a shorter duration",
            )
        return secs

    options = [
        MixedOption(
            "pool",
            f"{p.accelerator} pool",
            (p,),
            seconds,
            rates[p.accelerator] / total_rate,
            (price(p, seconds),),
            f"{throughput(p.accelerator).tflops:.0f} TFLOPS sustained per card",
        )
        for p in pools
    ]
    options.append(
        MixedOption(
            "split",
            "split: a stage per pool",
            pools,
            seconds,
            1.0,
            tuple(o.estimates[0] for o in options),
            "each pool runs its own job (a stage, or a shard sized to its throughput: "
            + ", ".join(f"{p.accelerator} {rates[p.accelerator] / total_rate * 100:.0f}%" for p in pools)
            + "); no step waits for another GPU type",
        )
    )
    slowest = min(pools, key=lambda p: throughput(p.accelerator).tflops)
    sync_rate = sum(p.count for p in pools) * throughput(slowest.accelerator).tflops
    sync_s = seconds_for(sync_rate)
    smallest = min(throughput(p.accelerator).memory_gib for p in pools)
    options.append(
        MixedOption(
            "one job",
            "one job over both pools",
            pools,
            sync_s,
            1.0,
            tuple(price(p, sync_s) for p in pools),
            f"synchronous steps wait for the slowest card ({slowest.accelerator}): every card at its pace, "
            f"and the model sharded for {smallest} GiB cards; the pools' link is the slowest network of the job",
        )
    )
    count = sum(p.count for p in pools)
    for acc in sorted({p.accelerator for p in pools}, key=lambda a: [p.accelerator for p in pools].index(a)):
        res = Resources(acc, count)
        secs = seconds_for(count * throughput(acc).tflops)
        options.append(MixedOption("single", f"all {acc}", (res,), secs, 1.0, (price(res, secs),)))
    return MixedPlan(pools, seconds, mode, table.currency, work / 1e6, tuple(options))
