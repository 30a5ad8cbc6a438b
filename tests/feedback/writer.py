"""A feedback writer process for the concurrency tests: ``python -m tests.feedback.writer GO LOG WHO N``."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from jupyter_starverse.client import Starverse


def main() -> None:
    go, log, who, n = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
    client = Starverse()
    Path(f"{go}.ready.{who}").touch()
    while not go.exists():
        time.sleep(0.01)
    for i in range(n):
        client.feedback.record(
            log,
            model="hf:team/tiny@main",
            prompt=f"question {i % 5}",
            answer=f"answer {i} by {who}",
            vote="up" if (i + len(who)) % 2 else "down",
            user=who,
        )
    print("ok")


if __name__ == "__main__":
    main()
