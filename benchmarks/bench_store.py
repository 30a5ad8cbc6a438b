"""Shared store benchmark: mount cost, single-flight origin traffic, pull throughput.

Prints, measured in this run (nothing asserted):

1. ``mount`` p50 for a 10 MB and a 2 GB entry and their ratio (goal <= 1.2, well under
   50 ms), next to huggingface_hub's own offline cache hit (``local_files_only``).
2. Origin bytes / entry bytes when 8 processes pull one model and one dataset at once
   (goal 1.00).
3. Pull throughput vs a plain HTTP GET of the same bytes from the same server (goal >= 0.9).

The 2 GB entry comes from a sparse source file and stays sparse on the store, so the
run neither fills the disk nor takes long. Servers run in their own processes (no GIL
sharing with the client). Usage: ``python benchmarks/bench_store.py [--big-gb 2] [--mb 256]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pull import serve  # noqa: E402  one loopback origin launcher for both benchmarks

sys.path.insert(0, str(ROOT))

from jupyter_starverse._settings import Settings  # noqa: E402
from jupyter_starverse.catalog import Catalog  # noqa: E402

MB = 1024 * 1024


def pythonpath() -> str:
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)


def p50(fn: Callable[[], object], n: int = 200) -> float:
    for _ in range(5):
        fn()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def stats(url: str) -> dict[str, object]:
    with urllib.request.urlopen(f"{url}/_stats") as r:
        return dict(json.load(r))


def env_for(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STARVERSE_", "HF_"))}
    return {**env, "STARVERSE_HOME": str(home), "PYTHONPATH": pythonpath(), "HF_HUB_DISABLE_TELEMETRY": "1", **extra}


def concurrent_pulls(home: Path, ref: str, env: dict[str, str], n: int = 8) -> None:
    home.mkdir(parents=True, exist_ok=True)
    go = home / f"go-{abs(hash(ref))}"
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.catalog.worker", str(go), "pull", ref],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
        )
        for _ in range(n)
    ]
    while len(list(home.glob(f"{go.name}.ready.*"))) < n:
        if any(p.poll() not in (None, 0) for p in procs):
            raise SystemExit("a pulling process failed to start")
        time.sleep(0.05)
    go.touch()
    for p in procs:
        assert p.wait() == 0


def bench_mount(tmp: Path, big_gb: float) -> None:
    import huggingface_hub

    src = tmp / "src"
    (src / "small").mkdir(parents=True)
    (src / "big").mkdir()
    (src / "small" / "data.bin").write_bytes(os.urandom(10 * MB))
    with open(src / "big" / "data.bin", "wb") as f:
        f.truncate(int(big_gb * 1024**3))  # sparse
    home = tmp / "mount-home"
    catalog = Catalog(Settings.from_env({"STARVERSE_HOME": str(home)}))
    catalog.add_dataset("small", str(src / "small"))
    catalog.add_dataset("big", str(src / "big"))
    t0 = time.perf_counter()
    catalog.pull("small")
    catalog.pull("big")
    setup = time.perf_counter() - t0
    small = p50(lambda: catalog.mount("small"))
    big = p50(lambda: catalog.mount("big"))
    fresh = p50(lambda: Catalog(catalog.settings).mount("big"))  # a new catalog object each time

    spec = {"hub": {"org/model": {"config.json": [200, 1], "model.safetensors": [10 * MB, 2]}}}
    with serve(spec) as url:
        os.environ["HF_ENDPOINT"] = url
        catalog.pull("hf:org/model")
    model = p50(lambda: catalog.mount("hf:org/model"))
    cache = str(catalog.hf_cache_dir)
    hf_file = p50(
        lambda: huggingface_hub.hf_hub_download("org/model", "config.json", cache_dir=cache, local_files_only=True)
    )
    hf_snap = p50(lambda: huggingface_hub.snapshot_download("org/model", cache_dir=cache, local_files_only=True))
    print(f"## mount (p50 of 200, in process; entries pulled in {setup:.1f} s)")
    print(f"  dataset 10 MB              {small * 1e3:8.3f} ms")
    print(f"  dataset {big_gb:g} GB (sparse)     {big * 1e3:8.3f} ms   ratio big/small = {big / small:.2f}")
    print(f"  dataset {big_gb:g} GB, new Catalog {fresh * 1e3:8.3f} ms")
    print(f"  model hf:org/model         {model * 1e3:8.3f} ms")
    print(f"  huggingface_hub offline hf_hub_download    {hf_file * 1e3:8.3f} ms  (ours/hf = {model / hf_file:.2f})")
    print(f"  huggingface_hub offline snapshot_download  {hf_snap * 1e3:8.3f} ms  (ours/hf = {model / hf_snap:.2f})")


def bench_single_flight(tmp: Path, mb: int) -> None:
    print("## origin bytes / entry bytes, 8 processes pulling at once")
    spec = {"hub": {"org/big": {"config.json": [300, 3], "model.safetensors": [mb * MB, 4], "tok.json": [2 * MB, 5]}}}
    with serve(spec) as url:
        home = tmp / "sf-model"
        t0 = time.perf_counter()
        concurrent_pulls(home, "hf:org/big", env_for(home, HF_ENDPOINT=url))
        took = time.perf_counter() - t0
        entry = Catalog(Settings.from_env({"STARVERSE_HOME": str(home)})).status("hf:org/big").size
        sent = int(stats(url)["bytes_sent"])  # type: ignore[call-overload]
        print(f"  model   {sent / entry:.2f}  ({sent} / {entry} bytes, {took:.1f} s)")
    spec = {"files": {f"ds/part-{i}.bin": [mb * MB // 4, 10 + i] for i in range(4)}}
    with serve(spec) as url:
        home = tmp / "sf-data"
        catalog = Catalog(Settings.from_env({"STARVERSE_HOME": str(home)}))
        catalog.add_dataset("shared", f"{url}/ds/")
        t0 = time.perf_counter()
        concurrent_pulls(home, "shared", env_for(home))
        took = time.perf_counter() - t0
        entry = catalog.status("shared").size
        sent = int(stats(url)["bytes_sent"])  # type: ignore[call-overload]
        print(f"  dataset {sent / entry:.2f}  ({sent} / {entry} bytes, {took:.1f} s)")


def plain_get(url: str, dest: Path) -> float:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url) as r, open(dest, "wb") as f:
        while chunk := r.read(4 * MB):
            f.write(chunk)
    took = time.perf_counter() - t0
    dest.unlink()
    return took


def bench_throughput(tmp: Path, mb: int, repeats: int = 5) -> None:
    import fsspec

    size = mb * MB
    print(f"## pull throughput vs plain HTTP GET of the same {mb} MB (median of {repeats}, interleaved)")
    with serve({"files": {"ds/blob.bin": [size, 42]}}) as url:
        ours, base = [], []
        for i in range(repeats):
            base.append(plain_get(f"{url}/ds/blob.bin", tmp / "plain.bin"))
            catalog = Catalog(Settings.from_env({"STARVERSE_HOME": str(tmp / f"tp-{i}")}))
            catalog.add_dataset("blob", f"{url}/ds/")
            t0 = time.perf_counter()
            catalog.pull("blob")
            ours.append(time.perf_counter() - t0)
            catalog.rm("blob")
        stream = []
        for _ in range(repeats):
            fs = fsspec.filesystem("http", skip_instance_cache=True)
            t0 = time.perf_counter()
            with fs.open(f"{url}/ds/blob.bin", "rb", block_size=0) as f:
                while f.read(16 * MB):
                    pass
            stream.append(time.perf_counter() - t0)
        g, o = size / statistics.median(base), size / statistics.median(ours)
        s = size / statistics.median(stream)
        print(f"  fsspec http stream alone (no store)      {s / MB:7.1f} MB/s  ratio to plain GET {s / g:.2f}")
        print(
            f"  dataset pull (fsspec, size+ETag+sha256)  {o / MB:7.1f} MB/s"
            f"  plain GET {g / MB:7.1f} MB/s  ratio {o / g:.2f}"
        )
    import huggingface_hub

    with serve({"hub": {"org/tp": {"model.safetensors": [size, 43]}}}) as url:
        os.environ["HF_ENDPOINT"] = url
        ours, base, bare = [], [], []
        for i in range(repeats):
            base.append(plain_get(f"{url}/org/tp/resolve/main/model.safetensors", tmp / "plain.bin"))
            t0 = time.perf_counter()
            huggingface_hub.snapshot_download("org/tp", cache_dir=tmp / f"bare-{i}", endpoint=url)
            bare.append(time.perf_counter() - t0)
            catalog = Catalog(Settings.from_env({"STARVERSE_HOME": str(tmp / f"tm-{i}")}))
            t0 = time.perf_counter()
            catalog.pull("hf:org/tp")
            ours.append(time.perf_counter() - t0)
            catalog.rm("hf:org/tp")
        g, o, b = (size / statistics.median(x) for x in (base, ours, bare))
        print(
            f"  model pull (snapshot_download + sha256)  {o / MB:7.1f} MB/s"
            f"  plain GET {g / MB:7.1f} MB/s  ratio {o / g:.2f}"
        )
        print(f"  bare huggingface_hub.snapshot_download   {b / MB:7.1f} MB/s  (ours / bare = {o / b:.2f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big-gb", type=float, default=2.0, help="size of the big (sparse) entry")
    parser.add_argument("--mb", type=int, default=256, help="payload for the pull benchmarks")
    parser.add_argument("--only", choices=("mount", "single-flight", "throughput"), default=None)
    args = parser.parse_args()
    os.environ.pop("HF_HUB_OFFLINE", None)
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"# {os.cpu_count()} CPUs, load {load:.1f}, python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory(prefix="bench-store-") as d:
        tmp = Path(d)
        if args.only in (None, "mount"):
            bench_mount(tmp, args.big_gb)
        if args.only in (None, "single-flight"):
            bench_single_flight(tmp, args.mb)
        if args.only in (None, "throughput"):
            bench_throughput(tmp, args.mb)


if __name__ == "__main__":
    main()
