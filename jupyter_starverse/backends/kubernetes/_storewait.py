"""The init container of training pods: wait, reading only, until the store holds the entries.

``python -m jupyter_starverse.backends.kubernetes._storewait [--timeout S] REF...``. The warm-up
pod (the only pod that mounts the store read-write) pulls them; a training pod mounts the store
read-only and starts once every entry is published. Exit 0 when all are there, 3 on timeout,
2 for an entry the catalog does not know.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jupyter_starverse.catalog import Catalog


def ready(catalog: Catalog, ref: str) -> bool:
    """True once ``ref`` is pulled (``cached``): :meth:`Catalog.status` only reads."""
    return catalog.status(ref).state == "cached"


def main(argv: list[str] | None = None) -> int:
    from jupyter_starverse._settings import Settings
    from jupyter_starverse.catalog import Catalog
    from jupyter_starverse.errors import NotFoundError

    parser = argparse.ArgumentParser(prog="starverse-store-wait")
    parser.add_argument("--timeout", type=float, default=24 * 3600.0)
    parser.add_argument("--poll", type=float, default=5.0)
    parser.add_argument("refs", nargs="+")
    args = parser.parse_args(argv)
    catalog = Catalog(Settings.from_env())
    store = str(catalog.root)
    deadline = time.monotonic() + args.timeout
    waiting = list(args.refs)
    told = False
    while waiting:
        try:
            waiting = [r for r in waiting if not ready(catalog, r)]
        except NotFoundError as e:
            print(f"starverse: {e.message}; {e.hint or ''}", file=sys.stderr)
            return 2
        if not waiting:
            break
        if time.monotonic() > deadline:
            print(
                f"starverse: still not in the store after {args.timeout:.0f}s: {', '.join(waiting)}; "
                "check the <job>-warmup pod's log",
                file=sys.stderr,
            )
            return 3
        if not told:
            print(f"waiting for the warm-up job to pull {', '.join(waiting)} into {store}", flush=True)
            told = True
        time.sleep(args.poll)
    return 0


if __name__ == "__main__":
    sys.exit(main())
