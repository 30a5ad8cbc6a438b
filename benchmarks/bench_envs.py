"""Job environments (issue 28): build once on the store vs pip in every rank.

A notebook has 10 packages the job's Python lacks (tiny generated pure-Python wheels, 256 KiB of
data each, installed into a folder only the "kernel" sees). Measured, medians of 3 rounds, each on
a fresh store:

- first launch: capture + diff + build of the environment (wheels made from the kernel's files,
  ``pip install --target``, publish), what ``Starverse.launch`` does before it submits;
- second launch: the same packages again (the environment is found by its lock hash; nothing built);
- pip in every rank: each of N=4 ranks runs ``pip install`` of the same 10 wheels itself, at once.

    .venv/bin/python benchmarks/bench_envs.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import show_load
from jupyter_starverse._settings import Settings
from jupyter_starverse.envs import JobEnvs
from jupyter_starverse.jobmodel import JobSpec
from tests.envs._wheels import install_in_notebook, write_wheel

PACKAGES, RANKS, ROUNDS = 10, 4, 3


def _round(root: Path) -> tuple[float, float, float, int]:
    wheels = [write_wheel(root / "wheels", f"svbench_{i}", "1.0", payload=256 * 1024) for i in range(PACKAGES)]
    site = root / "kernel-site"
    install_in_notebook(site, *wheels)
    settings = Settings.from_env({"STARVERSE_HOME": str(root / "home"), "STARVERSE_STORE": str(root / "store")})
    envs = JobEnvs(settings, kernel_path=[*sys.path, str(site)])
    spec = JobSpec(name="bench", command=("true",), env_from="notebook")
    target = f"python:{sys.executable}"
    t0 = time.perf_counter()
    _, plan = envs.resolve(spec, target, build=True)
    first = time.perf_counter() - t0
    assert plan is not None and plan.build is not None and plan.build.built
    size = plan.build.record.size
    t0 = time.perf_counter()
    _, again = envs.resolve(spec, target, build=True)
    second = time.perf_counter() - t0
    assert again is not None and again.build is not None and not again.build.built
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--no-deps",
                "--no-index",
                "--quiet",
                "--disable-pip-version-check",
                "--target",
                str(root / f"rank{r}"),
                *map(str, wheels),
            ]
        )
        for r in range(RANKS)
    ]
    assert all(p.wait() == 0 for p in procs)
    per_rank = time.perf_counter() - t0
    return first, second, per_rank, size


def main() -> None:
    show_load()
    rows = []
    for _ in range(ROUNDS):
        with tempfile.TemporaryDirectory() as tmp:
            rows.append(_round(Path(tmp)))
    first, second, per_rank = (statistics.median(r[i] for r in rows) for i in range(3))
    size = rows[0][3]
    print(f"environment of {PACKAGES} packages: {size / 2**20:.2f} MiB on the store")
    print(f"first launch (capture, diff, build once): median {first:.2f} s")
    print(
        f"second launch (same lock hash, nothing built): median {second * 1000:.0f} ms ({first / second:.0f}x faster)"
    )
    print(f"pip install in every rank (N={RANKS}, at once): median {per_rank:.2f} s "
          f"({per_rank / first:.1f}x the one build; {per_rank / second:.0f}x the second launch)")  # fmt: skip
    print(f"store bytes: one build {size / 2**20:.2f} MiB vs {RANKS} rank copies {RANKS * size / 2**20:.2f} MiB")


if __name__ == "__main__":
    main()
