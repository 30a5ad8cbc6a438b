"""Logs of every pod of a job, multiplexed, with rank prefixes, copied into the run folder.

One thread per pod streams ``pods/log`` (``follow`` keeps the connection open until the pod
ends) into one queue; the caller's iterator drains it. Every pod's text is also written to
``logs/pods/<pod>.node<N>.log`` in the run folder so the logs outlive the pods (Job TTL, node loss).
``torchrun --tee`` prefixes (``[default3]:``) become global ranks.
"""

from __future__ import annotations

import queue
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from jupyter_starverse.jobmodel import LogLine

__all__ = ["PodStream", "fan_in", "parse_line", "saved_logs"]

_TEE = re.compile(r"^\[(?:[A-Za-z_]+)(\d+)\]:(.*)$")


@dataclass(frozen=True)
class PodStream:
    """One pod to read: its name, node index, and where its copy goes."""

    name: str
    node: int
    copy_to: Path | None = None


def parse_line(text: str, *, node: int, procs_per_node: int) -> LogLine:
    """A pod log line as a :class:`LogLine`; torchrun's ``[role<local rank>]:`` gives the rank."""
    m = _TEE.match(text)
    if m:
        return LogLine(node, node * procs_per_node + int(m.group(1)), m.group(2))
    return LogLine(node, None, text)


def fan_in(
    pods: list[PodStream],
    open_stream: Callable[[PodStream], Iterator[bytes]],
    *,
    procs_per_node: int,
    rank: int | None = None,
    extra: Iterator[LogLine] | None = None,
    pods_done: threading.Event | None = None,
) -> Iterator[LogLine]:
    """Lines of all ``pods`` as they arrive; ``open_stream(pod)`` yields raw chunks.

    ``extra`` is merged in from its own thread (the rank logs the workers write into the run
    folder, when this machine sees it); ``pods_done`` is set once every pod stream ended.
    """
    out: queue.Queue[LogLine | BaseException | None] = queue.Queue(maxsize=10_000)
    stop = threading.Event()

    def pump(pod: PodStream) -> None:
        copy = None
        try:
            if pod.copy_to is not None:
                pod.copy_to.parent.mkdir(parents=True, exist_ok=True)
                copy = pod.copy_to.open("wb")
            partial = b""
            for chunk in open_stream(pod):
                if stop.is_set():
                    return
                if copy is not None:
                    copy.write(chunk)
                    copy.flush()
                lines = (partial + chunk).split(b"\n")
                partial = lines.pop()
                for raw in lines:
                    out.put(
                        parse_line(
                            raw.decode(errors="replace").rstrip("\r"), node=pod.node, procs_per_node=procs_per_node
                        )
                    )
            if partial:
                out.put(parse_line(partial.decode(errors="replace"), node=pod.node, procs_per_node=procs_per_node))
        except BaseException as e:
            out.put(e)
        finally:
            if copy is not None:
                copy.close()
            out.put(None)

    def pump_extra(lines: Iterator[LogLine]) -> None:
        try:
            for line in lines:
                if stop.is_set():
                    return
                out.put(line)
        except BaseException as e:  # handed to the consumer, raised there
            out.put(e)
        finally:
            out.put(None)

    threads = [threading.Thread(target=pump, args=(p,), daemon=True, name=f"log-{p.name}") for p in pods]
    if extra is not None:
        threads.append(threading.Thread(target=pump_extra, args=(extra,), daemon=True, name="log-run-folder"))
    for t in threads:
        t.start()
    done = 0
    try:
        while done < len(threads):
            item = out.get()
            if item is None:
                done += 1
                if pods_done is not None and done >= len(pods):
                    pods_done.set()  # streams end in any order; the extra one ends after this
            elif isinstance(item, BaseException):
                raise item
            elif rank is None or item.rank == rank:
                yield item
    finally:
        stop.set()


def saved_logs(run_dir: Path, *, procs_per_node: int, rank: int | None = None) -> Iterator[LogLine]:
    """The copies in ``logs/pods/`` (for jobs whose pods are gone), node by node."""
    folder = run_dir / "logs" / "pods"
    for path in sorted(folder.glob("*.log")) if folder.is_dir() else []:
        node = int(path.stem.rsplit(".node", 1)[-1]) if ".node" in path.stem else 0
        for text in path.read_text(errors="replace").splitlines():
            line = parse_line(text, node=node, procs_per_node=procs_per_node)
            if rank is None or line.rank == rank:
                yield line
