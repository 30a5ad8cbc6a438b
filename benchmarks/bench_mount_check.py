"""What the tamper check costs: ``mount``, ``status`` and ``ls`` of an entry with many small files.

Run from the repository root::

    python benchmarks/bench_mount_check.py [--files 10000] [--repeat 3]

Prints the median of ``--repeat`` timings (each a fresh ``Catalog``, in process, warm page
cache) for an entry of ``--files`` small files and for one of 10 files, and their ratio.
``mount`` and ``status`` stat every file of the entry against its manifest (size, mtime,
ctime: see ``catalog/_seal.py``); ``verify`` (hashing every byte) is shown for scale.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import median_ms, show_load  # noqa: E402
from jupyter_starverse._settings import Settings  # noqa: E402
from jupyter_starverse.catalog import Catalog  # noqa: E402


def make_source(folder: Path, files: int) -> Path:
    for i in range(files):
        sub = folder / f"part-{i // 1000:03d}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"f{i:06d}.txt").write_bytes(f"sample {i}\n".encode() * 4)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    show_load()
    with tempfile.TemporaryDirectory(prefix="sv-bench-seal-") as tmp:
        base = Path(tmp)
        settings = Settings.from_env({"STARVERSE_HOME": str(base / "home")})
        catalog = Catalog(settings)
        start = time.perf_counter()
        for name, n in (("many", args.files), ("few", 10)):
            catalog.add_dataset(name, str(make_source(base / f"src-{name}", n)))
            catalog.pull(name)
        print(f"## tamper check ({args.files} and 10 small files, pulled in {time.perf_counter() - start:.1f} s)")
        print(f"median CPU time of {args.repeat}, each with a fresh Catalog")
        # CPU time of this process: steadier than wall time on a shared machine; the work is in-process
        # system calls and parsing, so the two agree on an idle one
        for what, fn in (
            ("mount", lambda name: Catalog(settings).mount(name)),
            ("status", lambda name: Catalog(settings).status(name)),
            ("ls (both entries)", None),
            ("verify", lambda name: Catalog(settings).verify(name)),
        ):
            if fn is None:
                ms = median_ms(lambda: Catalog(settings).ls(), args.repeat, clock=time.process_time, warm_up=True)
                print(f"{what:<18} {ms:9.2f} ms")
                continue
            many = median_ms(lambda fn=fn: fn("many"), args.repeat, clock=time.process_time, warm_up=True)
            few = median_ms(lambda fn=fn: fn("few"), args.repeat, clock=time.process_time, warm_up=True)
            print(f"{what:<18} {many:9.2f} ms for {args.files} files, {few:7.2f} ms for 10 (ratio {many / few:.1f})")


if __name__ == "__main__":
    main()
