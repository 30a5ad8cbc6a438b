"""What every benchmark measures the same way: a median of repeated calls, and the machine's load.

These machines are shared and noisy: benchmarks report medians and ratios against a peer measured in
the same run, with the load beside them, never a single wall-clock figure.
"""

from __future__ import annotations

import atexit
import os
import statistics
import time
from collections.abc import Callable


def median_ms(
    fn: Callable[[], object], repeat: int, *, clock: Callable[[], float] = time.perf_counter, warm_up: bool = False
) -> float:
    """The median time of ``repeat`` calls of ``fn`` by ``clock`` (wall time; ``time.process_time`` for this
    process's CPU time, steadier on a shared machine for in-process work), in milliseconds; ``warm_up``: one
    call first that does not count (page cache, imports)."""
    if warm_up:
        fn()
    times = []
    for _ in range(repeat):
        start = clock()
        fn()
        times.append((clock() - start) * 1000)
    return statistics.median(times)


def load() -> str:
    """The machine's load over 1, 5 and 15 minutes, as ``1.0/0.8/0.5``."""
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def show_load() -> None:
    """Print the machine's load now and again when the benchmark ends: its figures ran between the two."""
    print(f"machine: load {load()} on {os.cpu_count()} cores")
    atexit.register(lambda: print(f"machine at the end: load {load()}"))
