"""Pull throughput of the store against the usual download tools, on a loopback origin.

The origin (``tests.catalog.servers``, its own process, a child of this one) honours
``Range`` and can limit every connection to a rate, like a CDN. Every tool downloads the
same bytes from it into a fresh folder; medians of ``--runs`` runs (default 3) are printed
with MB/s and the ratio to the best baseline of the row. Scenarios:

1. one file of ``--mb`` MiB (the issue: 1 GiB), unlimited and at ``--rate`` MB/s per connection;
2. a model of 4 shards of ``--mb / 4`` MiB each plus a config, same two rates;
3. ``--small`` small files (default 10,000 of 4 KiB) from a local folder (vs ``cp -r``) and over
   HTTP (vs ``aria2c -i list -j8``).

Tools: ``curl`` (one connection; also followed by ``sync --data``: the durable baseline, since
the pull fsyncs and curl leaves the bytes in the page cache), ``aria2c -x8 -s8 -k1M``,
``hf_transfer.download(max_files=8)``, ``huggingface_hub.snapshot_download`` and ``starverse
store pull`` (sha256 verified, fsync'ed, through the Hub cache layout). Before the tables, the
two ceilings of one verified, durable file on this machine are printed: sha256 on one core, and
write + fdatasync. A tool that is not installed is printed as skipped. starverse and
snapshot_download run in a fresh Python process each; the table shows the pull itself (timed
inside the process, after imports) and, in brackets, the whole process.

Usage: ``python benchmarks/bench_pull.py [--mb 1024] [--rate 25] [--runs 3] [--small 10000]``
(``--quick``: 64 MiB, 1,000 small files, one run; ``--only hub|small|small-local|small-http``:
one part; the local small-file rows alternate ``cp -r`` and the pull run by run).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MB = 1024 * 1024
sys.path.insert(0, str(ROOT))


def pythonpath() -> str:
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)


@contextmanager
def serve(spec: dict[str, object]) -> Iterator[str]:
    """The loopback origin in a child process; yields its URL."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)  # a listing of 10,000 files is too long for a command line
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.catalog.servers", "@" + f.name],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": pythonpath()},
    )
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        proc.kill()
        proc.wait()
        os.unlink(f.name)


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STARVERSE_", "HF_"))}
    return {**env, "PYTHONPATH": pythonpath(), "HF_HUB_DISABLE_TELEMETRY": "1", "OMP_NUM_THREADS": "1", **extra}


class Row:
    """Times of one tool in one scenario: (pull seconds, whole-process seconds) per run."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.runs: list[tuple[float, float]] = []
        self.loads: list[float] = []  # 1-minute load average at the start of each run
        self.skipped: str | None = None

    @property
    def median(self) -> float:
        return statistics.median(t for t, _ in self.runs)

    @property
    def median_process(self) -> float:
        return statistics.median(p for _, p in self.runs)

    @property
    def load(self) -> str:
        return f"load {statistics.median(self.loads):4.1f}" if self.loads else ""


def run_cmd(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    t0 = time.perf_counter()
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed ({out.returncode}): {out.stderr[-2000:]}")
    inner = [line for line in out.stdout.splitlines() if line.startswith("PULL_SECONDS ")]
    return (float(inner[-1].split()[1]) if inner else wall), wall


def measure(row: Row, runs: int, once: Callable[[Path], tuple[float, float]], tmp: Path) -> Row:
    for i in range(runs):
        dest = tmp / f"{row.name.split()[0]}-{i}"
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        row.loads.append(os.getloadavg()[0])
        try:
            row.runs.append(once(dest))
        finally:
            shutil.rmtree(dest, ignore_errors=True)
    return row


_IN_PROCESS = """
import sys, time, os
t0 = time.perf_counter()
{code}
print("PULL_SECONDS", time.perf_counter() - t0)
"""


def python_timed(code: str, env: dict[str, str], imports: str) -> tuple[float, float]:
    script = imports + "\n" + _IN_PROCESS.format(code=code)
    return run_cmd([sys.executable, "-c", script], env)


def tools_for_files(
    url: str, repo: str, paths: list[str], rate_note: str, args: argparse.Namespace, tmp: Path
) -> list[Row]:
    """Every tool fetching ``paths`` of Hub repo ``repo`` served at ``url``."""
    urls = [f"{url}/{repo}/resolve/main/{p}" for p in paths]
    rows: list[Row] = []
    n = args.connections

    def curl(dest: Path) -> tuple[float, float]:
        argv = ["curl", "-sS", "--fail"]
        for i, u in enumerate(urls):
            argv += ["-o", str(dest / f"f{i}"), u]
        return run_cmd(argv)

    def curl_sync(dest: Path) -> tuple[float, float]:
        """curl, then ``sync --data`` of what it wrote: the durable baseline (the pull fsyncs too)."""
        pull, wall = curl(dest)
        t, _ = run_cmd(["sync", "--data", *(str(dest / f"f{i}") for i in range(len(urls)))])
        return pull + t, wall + t

    def aria2(dest: Path) -> tuple[float, float]:
        listing = dest / "input.txt"
        listing.write_text("".join(f"{u}\n  out=f{i}\n" for i, u in enumerate(urls)))
        argv = ["aria2c", "-q", f"-x{n}", f"-s{n}", "-k1M", "-j4", "--file-allocation=none"]
        argv += ["--allow-overwrite=true", "--auto-file-renaming=false", "-d", str(dest), "-i", str(listing)]
        return run_cmd(argv)

    def hf_transfer(dest: Path) -> tuple[float, float]:
        code = "\n".join(
            f"hf_transfer.download(url={u!r}, filename={str(dest / f'f{i}')!r}, max_files={n}, "
            f"chunk_size=10 * 1024 * 1024)"
            for i, u in enumerate(urls)
        )
        return python_timed(code, clean_env(), "import hf_transfer")

    def snapshot(dest: Path) -> tuple[float, float]:
        code = f"snapshot_download({repo!r}, cache_dir={str(dest)!r}, endpoint={url!r})"
        return python_timed(code, clean_env(HF_ENDPOINT=url), "from huggingface_hub import HfApi, snapshot_download")

    def starverse(dest: Path) -> tuple[float, float]:
        imports = (  # the same imports as snapshot_download's row, before the clock starts
            "from huggingface_hub import HfApi, snapshot_download\n"
            "from jupyter_starverse._settings import Settings\n"
            "from jupyter_starverse.catalog import Catalog\n"
            "catalog = Catalog(Settings.from_env())"
        )
        code = f"assert catalog.pull('hf:{repo}', connections={n}).state == 'cached'"
        env = clean_env(HF_ENDPOINT=url, STARVERSE_HOME=str(dest / "home"))
        return python_timed(code, env, imports)

    table: list[tuple[str, Callable[[Path], tuple[float, float]], str | None]] = [
        ("curl (1 conn/file)", curl, "curl"),
        (DURABLE, curl_sync, "curl"),
        (f"aria2c -x{n} -s{n}", aria2, "aria2c"),
        (f"hf_transfer max_files={n}", hf_transfer, None),
        ("snapshot_download", snapshot, None),
        (f"starverse store pull ({n} conns)", starverse, None),
    ]
    for name, once, exe in table:
        row = Row(name)
        if exe is not None and shutil.which(exe) is None:
            row.skipped = f"{exe} is not installed"
        elif name.startswith("hf_transfer") and not _importable("hf_transfer"):
            row.skipped = "hf_transfer is not installed (pip install hf_transfer)"
        else:
            try:
                measure(row, args.runs, once, tmp)
            except RuntimeError as e:
                row.skipped = f"failed: {e}"
        rows.append(row)
    return rows


def _importable(module: str) -> bool:
    return subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, check=False).returncode == 0


DURABLE = "curl, then sync --data"
DURABLE_FS = "curl -Z, then sync -f"


def report(title: str, nbytes: int, rows: list[Row], ours_prefix: str = "starverse", durable: str = DURABLE) -> None:
    """One table; the ratio is to the fastest baseline, and for our row also to the durable one."""
    print(f"\n{title}  ({nbytes / MB:,.0f} MiB)")
    done = [r for r in rows if r.runs]
    baselines = [r for r in done if not r.name.startswith(ours_prefix) and r.name != durable]
    best = min(baselines, key=lambda r: r.median) if baselines else None
    durable_row = next((r for r in done if r.name == durable), None)
    for r in rows:
        if r.skipped:
            print(f"  {r.name:34s}  skipped: {r.skipped}")
            continue
        rate = nbytes / r.median / 1e6
        proc = f"  [process {r.median_process:6.2f} s]" if abs(r.median_process - r.median) > 0.05 else ""
        ratio = f"  x{best.median / r.median:4.2f} of {best.name}" if best is not None else ""
        if durable_row is not None and r.name.startswith(ours_prefix):
            ratio += f", x{durable_row.median / r.median:4.2f} of {durable}"
        print(f"  {r.name:34s} {r.median:7.2f} s  {rate:8.1f} MB/s  {r.load}{ratio}{proc}")


def ceilings(mb: int, tmp: Path) -> None:
    """What bounds a verified, durable pull of one file on this machine, whatever the network.

    sha256 runs on one core in file order; the fsync at the end waits for the disk.
    """
    block = os.urandom(MB)
    h = hashlib.sha256()
    t0 = time.perf_counter()
    for _ in range(mb):
        h.update(block)
    hashed = mb * MB / (time.perf_counter() - t0) / 1e6
    path = tmp / "durable.bin"
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for _ in range(mb):
            os.write(fd, block)
        os.fdatasync(fd)
    finally:
        os.close(fd)
    durable = mb * MB / (time.perf_counter() - t0) / 1e6
    path.unlink()
    print(f"ceilings of one file here: sha256 {hashed:,.0f} MB/s (one core); write + fdatasync {durable:,.0f} MB/s")


def bench_hub(args: argparse.Namespace, tmp: Path) -> None:
    size = args.mb * MB
    shard = size // 4
    hub = {
        "org/one": {"model.safetensors": [size, 1]},
        "org/sharded": {
            "config.json": [600, 2],
            **{f"model-0000{i + 1}-of-00004.safetensors": [shard, 10 + i] for i in range(4)},
        },
    }
    for rate in (None, args.rate) if args.rate else (None,):
        spec: dict[str, object] = {"hub": hub, "throttle": None if rate is None else rate * 1e6}
        label = "unlimited" if rate is None else f"{rate:g} MB/s per connection"
        with serve(spec) as url:
            rows = tools_for_files(url, "org/one", ["model.safetensors"], label, args, tmp)
            report(f"one file, {label}", size, rows)
            paths = sorted(hub["org/sharded"])
            rows = tools_for_files(url, "org/sharded", paths, label, args, tmp)
            report(f"model of 4 shards, {label}", 4 * shard + 600, rows)


def bench_small(args: argparse.Namespace, tmp: Path) -> None:
    n, kb = args.small, args.small_kb
    src = tmp / "small-src"
    for i in range(n):
        p = src / f"d{i // 1000:02d}" / f"f{i:05d}.bin"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(os.urandom(kb * 1024))
    nbytes = n * kb * 1024
    store_imports = (
        "from jupyter_starverse._settings import Settings\n"
        "from jupyter_starverse.catalog import Catalog\n"
        "catalog = Catalog(Settings.from_env())"
    )

    def cp(dest: Path) -> tuple[float, float]:
        return run_cmd(["cp", "-r", str(src), str(dest / "copy")])

    def ours_local(dest: Path) -> tuple[float, float]:
        env = clean_env(STARVERSE_HOME=str(dest / "home"))
        code = f"catalog.add_dataset('small', {str(src)!r}); assert catalog.pull('small').state == 'cached'"
        return python_timed(code, env, store_imports)

    if args.only != "small-http":
        # Alternating runs: on a shared machine the load drifts, and cp's runs should meet the same load.
        rows = [Row("cp -r"), Row("starverse store pull")]
        for _ in range(args.runs):
            measure(rows[0], 1, cp, tmp)
            measure(rows[1], 1, ours_local, tmp)
        title = f"{n:,} files of {kb} KiB from a local folder (starverse: one batch, sha256 per file, synced once)"
        report(title, nbytes, rows)
        if args.only == "small-local":
            return

    files = {f"small/{p.relative_to(src).as_posix()}": [kb * 1024, i] for i, p in enumerate(sorted(src.rglob("*.bin")))}
    with serve({"files": files}) as url:
        urls = [f"{url}/{rel}" for rel in files]

        def aria2(dest: Path) -> tuple[float, float]:
            listing = dest / "input.txt"
            listing.write_text("".join(f"{u}\n  out={u.split('/small/', 1)[1]}\n" for u in urls))
            argv = ["aria2c", "-q", f"-j{args.connections}", "-x1", "--file-allocation=none"]
            argv += ["--allow-overwrite=true", "--auto-file-renaming=false", "-d", str(dest), "-i", str(listing)]
            return run_cmd(argv)

        def ours_http(dest: Path) -> tuple[float, float]:
            env = clean_env(STARVERSE_HOME=str(dest / "home"))
            code = f"catalog.add_dataset('small', {url + '/small/'!r}); assert catalog.pull('small').state == 'cached'"
            return python_timed(code, env, store_imports)

        aria = Row(f"aria2c -i list -j{args.connections}")
        if shutil.which("aria2c") is None:
            aria.skipped = "aria2c is not installed"
        else:
            measure(aria, args.http_runs or args.runs, aria2, tmp)
        rows = [aria, measure(Row("starverse store pull"), args.http_runs or args.runs, ours_http, tmp)]
        report(f"{n:,} files of {kb} KiB over HTTP (starverse: listing + sha256 per file, synced once)", nbytes, rows)


def bench_small_hub(args: argparse.Namespace, tmp: Path, n: int) -> None:
    """A Hub dataset repo of ``n`` small files: curl -Z, aria2c, snapshot_download and the pull, interleaved.

    Every tool fetches the same ``resolve`` URLs from the loopback Hub (the tools without a Hub
    client get the list of URLs; starverse and snapshot_download list the repo's tree first).
    Runs alternate tool by tool, so that the load of a shared machine drifts over all of them.
    """
    kb = args.small_kb
    repo = "datasets/org/small"
    paths = [f"data/d{i // 1000:03d}/f{i:06d}.bin" for i in range(n)]
    spec = {"hub": {repo: {p: [kb * 1024, 1000 + i] for i, p in enumerate(paths)}}}
    nbytes = n * kb * 1024
    c = args.connections
    store_imports = (
        "from huggingface_hub import HfApi, snapshot_download\n"
        "from jupyter_starverse._settings import Settings\n"
        "from jupyter_starverse.catalog import Catalog\n"
        "catalog = Catalog(Settings.from_env())"
    )
    with serve(spec) as url:
        urls = [f"{url}/{repo}/resolve/main/{p}" for p in paths]

        def curl(dest: Path) -> tuple[float, float]:
            config = dest.parent / f"{dest.name}.curl"
            config.write_text(
                "".join(f'url = "{u}"\noutput = "{dest / p}"\n' for u, p in zip(urls, paths, strict=True))
            )
            try:
                return run_cmd(
                    ["curl", "-sS", "--fail", "-Z", "--parallel-max", str(c), "--create-dirs", "-K", str(config)]
                )
            finally:
                config.unlink()

        curl_row = Row(f"curl -Z --parallel-max {c}")

        def curl_sync(dest: Path) -> tuple[float, float]:
            """One curl run, two rows: curl alone (to the page cache) and curl, then ``sync -f``."""
            curl_row.loads.append(os.getloadavg()[0])
            pull, wall = curl(dest)
            curl_row.runs.append((pull, wall))
            t, _ = run_cmd(["sync", "-f", str(dest)])  # syncfs: what the pull's batch does once
            return pull + t, wall + t

        def aria2(dest: Path) -> tuple[float, float]:
            listing = dest.parent / f"{dest.name}.aria2"
            listing.write_text("".join(f"{u}\n  out={p}\n" for u, p in zip(urls, paths, strict=True)))
            argv = ["aria2c", "-q", f"-j{c}", "-x1", "--file-allocation=none", "--allow-overwrite=true"]
            try:
                return run_cmd([*argv, "--auto-file-renaming=false", "-d", str(dest), "-i", str(listing)])
            finally:
                listing.unlink()

        def snapshot(dest: Path) -> tuple[float, float]:
            name = repo.split("/", 1)[1]
            code = f"snapshot_download({name!r}, repo_type='dataset', cache_dir={str(dest)!r}, max_workers={c})"
            return python_timed(code, clean_env(HF_ENDPOINT=url), "from huggingface_hub import snapshot_download")

        def ours(dest: Path) -> tuple[float, float]:
            code = f"assert catalog.pull('hf:{repo}', connections={c}).state == 'cached'"
            return python_timed(code, clean_env(HF_ENDPOINT=url, STARVERSE_HOME=str(dest / "home")), store_imports)

        slow = n > args.slow_peers_max
        why = f"{n:,} files take this peer many minutes here (--slow-peers-max {n} runs it)"
        table: list[tuple[Row, Callable[[Path], tuple[float, float]], str | None]] = [
            (curl_row, curl, None),  # filled by the next row's runs
            (Row(DURABLE_FS), curl_sync, "curl"),
            (Row(f"aria2c -i list -j{c}"), aria2, None if slow else "aria2c"),
            (Row(f"snapshot_download max_workers={c}"), snapshot, None if slow else ""),
            (Row(f"starverse store pull ({c} conns)"), ours, ""),
        ]
        for row, _once, exe in table:
            if exe is None and row is not curl_row:
                row.skipped = why
            elif exe and shutil.which(exe) is None:
                row.skipped = curl_row.skipped = f"{exe} is not installed"
        for _ in range(args.runs):
            for row, once, _exe in table:
                if row.skipped is None and row is not curl_row:
                    try:
                        measure(row, 1, once, tmp)
                    except RuntimeError as e:
                        row.skipped = f"failed: {e}"
        title = f"Hub dataset repo, {n:,} files of {kb} KiB (starverse: tree listing, sha256 per file, synced once)"
        report(title, nbytes, [row for row, _o, _e in table], durable=DURABLE_FS)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=1024, help="size of the one file (and of the 4 shards together)")
    ap.add_argument(
        "--rate", type=float, default=25.0, help="MB/s per connection of the limited origin (0: unlimited rows only)"
    )
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--small", type=int, default=10_000, help="number of small files (0: skip)")
    ap.add_argument("--small-kb", type=int, default=4)
    ap.add_argument("--http-runs", type=int, default=None, help="runs of the small files over HTTP (default --runs)")
    ap.add_argument("--quick", action="store_true", help="64 MiB, 1,000 small files, one run")
    ap.add_argument("--only", choices=("hub", "small", "small-local", "small-http", "small-hub"), default=None)
    ap.add_argument(
        "--hub-small", default="10000,100000", help="file counts of the Hub dataset rows, comma-separated (empty: skip)"
    )
    ap.add_argument(
        "--slow-peers-max", type=int, default=10_000, help="aria2c and snapshot_download run up to this many files"
    )
    args = ap.parse_args()
    if args.quick:
        args.mb, args.small, args.runs, args.hub_small = 64, 1000, 1, "1000"
    print(
        f"bench_pull: {os.cpu_count()} CPUs, medians of {args.runs}; origin = loopback Python server (own process); "
        f"load {os.getloadavg()[0]:.1f} at the start, each row's median load beside it"
    )
    with tempfile.TemporaryDirectory(prefix="bench-pull-") as d:
        tmp = Path(d)
        if args.only in (None, "hub"):
            ceilings(args.mb, tmp)
        if args.only in (None, "hub"):
            bench_hub(args, tmp)
        if args.small and args.only in (None, "small", "small-local", "small-http"):
            bench_small(args, tmp)
        if args.only in (None, "small-hub"):
            for count in (int(c) for c in args.hub_small.split(",") if c.strip()):
                bench_small_hub(args, tmp, count)


if __name__ == "__main__":
    main()
