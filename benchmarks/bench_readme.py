"""README's first command, timed phase by phase in a fresh clone.

Run from the repository root::

    python benchmarks/bench_readme.py [--repeat 1] [--keep] [--skip-demo]

Clones the repository's committed HEAD into a temporary folder, then runs the phases of
README's "Run the main job" command there, each timed on its own:

- ``venv``: ``python3 -m venv .venv``;
- ``pip install``: ``pip install -e ".[EXTRA]"`` (the extra README names; the lab extension
  build is part of it);
- ``demo first line``: from ``starverse demo``'s start to its first line of output;
- ``demo``: the whole demo (creates a dataset, trains 2 x 2 local processes);
- ``jupyter lab --version`` and ``python -c "import ipykernel"``: what "Use it" needs next;
- ``Use it cells``: README's "Use it" notebook cells, run as written in a kernel of that venv
  (``python -m tests._readme``: a fresh store, ``./corpus`` made for them, the ``hf:`` pulls served
  by the tests' loopback Hub), each cell's time printed; ``--skip-use-it`` leaves them out.

Baseline measured in the same run: a bare ``python3 -m venv`` + ``pip install jupyterlab
ipykernel`` into another fresh venv (the floor any JupyterLab workspace pays). Medians over
``--repeat`` runs; the pip cache is shared, so a second run measures a warm cache.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _readme_command() -> str:
    readme = (ROOT / "README.md").read_text()
    found = re.search(r"```bash\n(.*starverse demo)\n```", readme)
    if not found:
        raise SystemExit("README's first command (ending in `starverse demo`) not found")
    return found.group(1)


def _run(argv: list[str] | str, cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, check=True, shell=isinstance(argv, str), stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def _demo(cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """(seconds to the first line of output, seconds in all) of ``starverse demo``."""
    start = time.perf_counter()
    first = None
    with subprocess.Popen(
        [str(cwd / ".venv" / "bin" / "starverse"), "demo"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            if first is None and line.strip():
                first = time.perf_counter() - start
                print(f"    first line after {first:.1f} s: {line.rstrip()[:100]}")
        if proc.wait() != 0:
            raise SystemExit(f"starverse demo failed ({proc.returncode})")
    return first or 0.0, time.perf_counter() - start


def _use_it(clone: Path, tmp: Path, env: dict[str, str]) -> float:
    """Seconds to run README's "Use it" cells in the clone's venv (they must pass)."""
    env = {k: v for k, v in env.items() if not k.startswith(("STARVERSE_", "HF_", "HUGGINGFACE_"))}
    env["STARVERSE_HOME"] = str(tmp / "use-it-home")
    start = time.perf_counter()
    done = subprocess.run(
        [str(clone / ".venv" / "bin" / "python"), "-m", "tests._readme", str(tmp / "use-it")],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
    )
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(
            f"README's 'Use it' cells failed in the fresh venv:\n{done.stdout[-3000:]}{done.stderr[-5000:]}"
        )
    for line in done.stdout.splitlines():
        print(f"    {line}")
    return took


def _once(args: argparse.Namespace, command: str, env: dict[str, str]) -> dict[str, float]:
    extra = re.search(r'pip install -e "\.\[(\w+)\]"', command)
    if not extra:
        raise SystemExit("README's first command installs no extra: update this benchmark")
    times: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="sv-readme-") as tmp:
        clone = Path(tmp) / "clone"
        times["git clone"] = _run(["git", "clone", "-q", str(ROOT), str(clone)], Path(tmp), env)
        times["venv"] = _run([sys.executable, "-m", "venv", ".venv"], clone, env)
        pip = str(clone / ".venv" / "bin" / "pip")
        times["pip install"] = _run([pip, "install", "-q", "-e", f".[{extra.group(1)}]"], clone, env)
        if not args.skip_demo:
            times["demo first line"], times["demo"] = _demo(clone, env)
        bin_dir = clone / ".venv" / "bin"
        times["jupyter lab --version"] = _run([str(bin_dir / "jupyter"), "lab", "--version"], clone, env)
        times["import ipykernel"] = _run([str(bin_dir / "python"), "-c", "import ipykernel"], clone, env)
        if not args.skip_use_it:
            times["Use it cells (kernel start + cells + job)"] = _use_it(clone, Path(tmp), env)
        base = Path(tmp) / "baseline"
        start = time.perf_counter()
        _run([sys.executable, "-m", "venv", str(base)], Path(tmp), env)
        _run([str(base / "bin" / "pip"), "install", "-q", "jupyterlab>=4.4,<5", "ipykernel"], Path(tmp), env)
        times["baseline: venv + pip install jupyterlab ipykernel"] = time.perf_counter() - start
        if args.keep:
            kept = Path(tempfile.mkdtemp(prefix="sv-readme-kept-"))
            os.rename(clone, kept / "clone")
            print(f"    kept the clone in {kept / 'clone'}")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the last clone (to try the 'Use it' section)")
    parser.add_argument("--skip-demo", action="store_true", help="leave out the demo")
    parser.add_argument("--skip-use-it", action="store_true", help="leave out README's 'Use it' cells")
    args = parser.parse_args()
    command = _readme_command()
    print(f"README command 1: {command}")
    env = dict(os.environ)
    registry = subprocess.run(["npm", "config", "get", "registry"], capture_output=True, text=True).stdout.strip()
    if registry:
        env["YARN_NPM_REGISTRY_SERVER"] = registry  # as the command's `export` does
    env.pop("VIRTUAL_ENV", None)
    runs = []
    for i in range(args.repeat):
        print(f"run {i + 1}/{args.repeat} (load {os.getloadavg()[0]:.1f})")
        runs.append(_once(args, command, env))
        for phase, seconds in runs[-1].items():
            print(f"    {phase:<52} {seconds:8.1f} s")
    print(f"\nmedians over {len(runs)} run(s), machine load {os.getloadavg()[0]:.1f}:")
    base = statistics.median(r["baseline: venv + pip install jupyterlab ipykernel"] for r in runs)
    for phase in runs[0]:
        median = statistics.median(r[phase] for r in runs)
        print(f"  {phase:<54} {median:8.1f} s   {median / base:6.2f}x baseline")
    print(f"(the baseline is a bare JupyterLab venv: {shlex.quote('pip install jupyterlab ipykernel')})")


if __name__ == "__main__":
    main()
