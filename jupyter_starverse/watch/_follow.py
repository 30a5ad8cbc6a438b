"""Reading (and following) the per-rank and per-node logs of a local run."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from jupyter_starverse.experiments import RunPaths
from jupyter_starverse.jobmodel import LogLine

__all__ = ["follow_logs"]


class _Tail:
    """Complete lines appended to one file since the last read.

    A rank's node is what its worker recorded in ``pids/rankN.json`` (torchrun hands out
    ranks in rendezvous order, not by node); until that file exists ``node`` is a guess.
    """

    def __init__(self, path: Path, node: int, rank: int | None, pid_file: Path | None = None) -> None:
        self.path, self.node, self.rank = path, node, rank
        self.pid_file = pid_file
        self.offset = 0
        self.partial = b""

    def _resolve_node(self) -> None:
        if self.pid_file is None:
            return
        try:
            self.node = int(json.loads(self.pid_file.read_text())["node"])
        except (OSError, ValueError, KeyError, TypeError):
            return  # not written yet (or being written): keep the guess, try again next read
        self.pid_file = None

    def read(self, *, final: bool = False) -> Iterator[LogLine]:
        self._resolve_node()
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
    tails = [_Tail(run.rank_log(r), r // procs_per_node, r, run.pids / f"rank{r}.json") for r in ranks]
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
