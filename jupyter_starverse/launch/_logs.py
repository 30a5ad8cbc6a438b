"""Reading (and following) the per-rank and per-node logs of a local run."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

from jupyter_starverse.experiments import RunPaths

from ._backend import LogLine

__all__ = ["follow_logs"]


class _Tail:
    """Complete lines appended to one file since the last read."""

    def __init__(self, path: Path, node: int, rank: int | None) -> None:
        self.path, self.node, self.rank = path, node, rank
        self.offset = 0
        self.partial = b""

    def read(self, *, final: bool = False) -> Iterator[LogLine]:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return
        self.offset += len(data)
        data = self.partial + data
        lines = data.split(b"\n")
        self.partial = lines.pop()
        if final and self.partial:
            lines.append(self.partial)
            self.partial = b""
        for line in lines:
            yield LogLine(self.node, self.rank, line.decode(errors="replace").rstrip("\r"))


def follow_logs(
    run: RunPaths,
    *,
    world_size: int,
    nodes: int,
    rank: int | None,
    follow: bool,
    finished: Callable[[], bool],
    poll: float = 0.25,
) -> Iterator[LogLine]:
    """Lines of every rank log (and every node's agent log when ``rank`` is None).

    Without ``follow`` each file is read once, rank by rank. With ``follow`` new lines are
    yielded as they arrive until the job has finished and the files are drained.
    """
    ranks = [rank] if rank is not None else list(range(world_size))
    procs_per_node = max(1, world_size // max(1, nodes))
    tails = [_Tail(run.rank_log(r), r // procs_per_node, r) for r in ranks]
    if rank is None:
        tails += [_Tail(run.node_log(n), n, None) for n in range(nodes)]
    if not follow:
        for t in tails:
            yield from t.read(final=True)
        return
    while True:
        done = finished()
        for t in tails:
            yield from t.read(final=done)
        if done:
            return
        time.sleep(poll)
