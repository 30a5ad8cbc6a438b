"""What every benchmark measures the same way: a median of repeated calls, and the machine's load.

These machines are shared and noisy: benchmarks report medians and ratios against a peer measured in
the same run, with the load beside them, never a single wall-clock figure.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    """The median wall time of ``repeat`` calls of ``fn``, in milliseconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def load() -> str:
    """The machine's load over 1, 5 and 15 minutes, as ``1.0/0.8/0.5``."""
    return "/".join(f"{x:.1f}" for x in os.getloadavg())
