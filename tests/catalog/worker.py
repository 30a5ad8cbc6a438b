"""A separate process for concurrency tests: wait for a start signal, then pull or read.

Usage: ``python -m tests.catalog.worker GO_FILE pull REF`` or ``... read NAME PATH``.
Settings come from the environment (``STARVERSE_HOME``, ``HF_ENDPOINT``). Prints one JSON line.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    go, verb, ref = Path(argv[0]), argv[1], argv[2]
    from jupyter_starverse._settings import Settings
    from jupyter_starverse.catalog import Catalog

    catalog = Catalog(Settings.from_env())
    Path(f"{go}.ready.{os.getpid()}").touch()
    while not go.exists():
        time.sleep(0.01)
    if verb == "pull":
        status = catalog.pull(ref)
        print(json.dumps({"state": status.state, "path": status.path}))
    elif verb == "read":
        data = catalog.fs(ref).cat(argv[3])
        print(json.dumps({"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
