"""What the panel's report list costs the server: ``GET evals`` with every report parsed per call
against the service's cache (a report.json is parsed again only when its mtime or size changed).

Writes ``--reports`` synthetic reports (three labels, the classification metrics, a predictions
path) into an isolated store and times, in turns (so a busy machine slows both alike):

- ``parse``: a fresh ``EvalService`` per call (what every ``GET evals`` did before the cache);
- ``cached``: one service, as the server holds it (``client.evals``), after its first call.

Prints the median milliseconds per call of each and the ratio parse/cached, and the panel's
``GET evals`` requests per minute before (the catalog every 1 s + the section every 5 s) and now.

Usage: ``python benchmarks/bench_eval_reports.py [--reports 300] [--rounds 30]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: The panel's polls of GET evals, in seconds (labextension/src/sections/catalog.tsx and evals.tsx).
BEFORE = {"catalog": 1.0, "evaluation section": 5.0}
NOW = {"catalog": 10.0, "evaluation section": 5.0}


def write_reports(root: Path, n: int) -> None:
    from jupyter_starverse.evals import EvalReport

    for i in range(n):
        folder = root / f"20261201-{i:06d}-bench"
        folder.mkdir(parents=True)
        labels = ["negative", "neutral", "positive"]
        metrics = {f"{k}_{a}": 0.5 for k in ("precision", "recall", "f1") for a in ("macro", "micro")}
        report = EvalReport(
            id=folder.name,
            model=f"hf:team/m{i % 7}@main",
            model_version="0" * 40,
            dataset="reviews@1",
            dataset_version="1",
            task="classification",
            examples=200,
            metrics={"accuracy": 0.5, **metrics},
            per_label=[{"label": x, "precision": 0.5, "recall": 0.5, "f1": 0.5, "support": 60} for x in labels],
            predictions=str(folder / "predictions.jsonl"),
            engine="transformers",
            seconds=12.0,
            created_at=1.7e9 + i,
            user="bench",
            options={"task": "classification", "prompt": "{input}", "labels": labels, "batch_size": 8},
            lineage={"model": f"hf:team/m{i % 7}@main", "dataset": "reviews@1", "parent": None},
        )  # fmt: skip
        (folder / "report.json").write_text(json.dumps(report.to_json(), indent=1), encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reports", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        os.environ.update({"STARVERSE_HOME": str(home / "home"), "STARVERSE_STORE": str(home / "store"),
                           "STARVERSE_EXPERIMENTS": str(home / "exp")})  # fmt: skip
        from jupyter_starverse._settings import Settings
        from jupyter_starverse.catalog import Catalog
        from jupyter_starverse.evals import EvalService

        settings = Settings.from_env()
        catalog = Catalog(settings)
        held = EvalService(settings, catalog)
        write_reports(held.root, args.reports)
        assert len(held.reports()) == args.reports  # the first call parses them all
        timings: dict[str, list[float]] = {"parse": [], "cached": []}
        for _ in range(args.rounds):
            t = time.perf_counter()
            got = EvalService(settings, catalog).reports()
            timings["parse"].append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            again = held.reports()
            timings["cached"].append((time.perf_counter() - t) * 1000)
            assert [r.id for r in got] == [r.id for r in again]
        parse, cached = statistics.median(timings["parse"]), statistics.median(timings["cached"])
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"{args.reports} reports, {args.rounds} rounds in turns (medians), load {load}")
        print(f"GET evals, every report parsed (before): {parse:8.2f} ms per call")
        print(f"GET evals, parsed once, stat per call:   {cached:8.2f} ms per call")
        print(f"ratio parse/cached: {parse / cached:.1f}x")
        per_min = {k: sum(60 / s for s in d.values()) for k, d in (("before", BEFORE), ("now", NOW))}
        print(f"panel GET evals per minute: before {per_min['before']:.0f}, now {per_min['now']:.0f}")
        cpu = {k: per_min[k] * v / 1000 for k, v in (("before", parse), ("now", cached))}
        print(f"server time on the panel's report list: before {cpu['before']:.2f} s/min, now {cpu['now']:.3f} s/min")


if __name__ == "__main__":
    main()
