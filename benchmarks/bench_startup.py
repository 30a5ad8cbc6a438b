"""Start-up of every door: the CLI, its --help, %load_ext, the server extension, in one table.

Run from the repository root::

    python benchmarks/bench_startup.py [--repeat 5]

Each row is a fresh interpreter (what a user waits for), timed wall-clock, median of
``--repeat``, measured interleaved so load affects every row alike:

- ``starverse --help`` and every command's ``starverse COMMAND --help``: help texts;
- ``starverse jobs ls``: the anchor, a real command that reads the job index;
- ``%load_ext jupyter_starverse`` in a fresh IPython shell, against ``%load_ext tensorboard``
  (the anchor of the notebook door, when tensorboard is installed) and a bare IPython start;
- ``import jupyter_starverse``, ``import jupyter_starverse.cli`` and ``import jupyter_starverse.server``
  (the package, the CLI's and the server extension's modules).

Each row also names the heaviest modules it imported (``python -X importtime``, self time).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_IPY = (
    "from IPython.testing.globalipapp import start_ipython; ip = start_ipython(); "
    "import sys, time; t = time.perf_counter(); {load}; took = time.perf_counter() - t; "
    "print(f'load_s={{took}}', file=sys.stderr); "
    "print('widgets' if 'ipywidgets' in sys.modules else 'no-widgets', file=sys.stderr)"
)


_LOAD = "ip.run_line_magic('load_ext', '{}')"


def _commands() -> list[str]:
    """Every top-level command of the CLI (its own table: a new group gets its row)."""
    sys.path.insert(0, str(ROOT))
    from jupyter_starverse.cli import _SUMMARIES

    return sorted(_SUMMARIES)


def _rows(has_tensorboard: bool) -> dict[str, list[str]]:
    cli = [sys.executable, "-m", "jupyter_starverse.cli"]
    rows = {
        "starverse jobs ls (anchor)": [*cli, "jobs", "ls"],
        "starverse --help": [*cli, "--help"],
        **{f"starverse {name} --help": [*cli, name, "--help"] for name in _commands()},
        "IPython start (floor)": [sys.executable, "-c", _IPY.format(load="pass")],
        "%load_ext jupyter_starverse": [sys.executable, "-c", _IPY.format(load=_LOAD.format("jupyter_starverse"))],
        "import jupyter_starverse": [sys.executable, "-c", "import jupyter_starverse"],
        "import jupyter_starverse.cli": [sys.executable, "-c", "import jupyter_starverse.cli"],
        "import jupyter_starverse.server": [sys.executable, "-c", "import jupyter_starverse.server"],
    }
    if has_tensorboard:
        rows["%load_ext tensorboard (anchor)"] = [sys.executable, "-c", _IPY.format(load=_LOAD.format("tensorboard"))]
    return rows


def _time(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{argv} failed: {done.stderr[-2000:]}")
    return took, done.stderr


def _heaviest(argv: list[str], env: dict[str, str], n: int = 3) -> str:
    done = subprocess.run(
        [argv[0], "-X", "importtime", *argv[1:]], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    tops: dict[str, int] = {}
    for line in done.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s+(\S+)", line)
        if m:
            top = m.group(2).split(".")[0]
            tops[top] = tops.get(top, 0) + int(m.group(1))
    best = sorted(tops.items(), key=lambda kv: -kv[1])[:n]
    return ", ".join(f"{name} {us / 1e6:.2f}s" for name, us in best)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    try:
        import tensorboard  # noqa: F401

        has_tb = True
    except ImportError:
        has_tb = False
    env = dict(os.environ)
    env.setdefault("STARVERSE_HOME", tempfile.mkdtemp(prefix="sv-bench-startup-"))  # an empty job index
    rows = _rows(has_tb)
    load_before = os.getloadavg()[0]
    times: dict[str, list[float]] = {name: [] for name in rows}
    widgets: dict[str, str] = {}
    in_process: dict[str, list[float]] = {}  # the %load_ext line alone, inside the started shell
    for _ in range(args.repeat):  # interleaved: each round runs every row once
        for name, argv in rows.items():
            took, err = _time(argv, env)
            times[name].append(took)
            if "widgets" in err:
                widgets[name] = err.strip().splitlines()[-1]
            found = re.search(r"load_s=([0-9.e-]+)", err)
            if found:
                in_process.setdefault(name, []).append(float(found.group(1)))
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    cli_anchor = medians["starverse jobs ls (anchor)"]
    nb_anchor = medians.get("%load_ext tensorboard (anchor)")
    print(f"medians of {args.repeat}, fresh interpreters, machine load {load_before:.1f} -> {os.getloadavg()[0]:.1f}")
    print(f"{'door':<34} {'median':>8} {'vs jobs ls':>11} {'vs tb':>7}  heaviest imports")
    for name, median in medians.items():
        vs_tb = f"{median / nb_anchor:6.2f}x" if nb_anchor and name.startswith(("%", "IPython")) else "      -"
        note = f" [{widgets[name]}]" if name in widgets else ""
        if name in in_process:
            note += f" [the line itself: {statistics.median(in_process[name]) * 1000:.1f} ms]"
        print(f"{name:<34} {median:7.2f}s {median / cli_anchor:10.2f}x {vs_tb}  {_heaviest(rows[name], env)}{note}")
    helps = {name: m for name, m in medians.items() if name.endswith("--help")}
    worst = max(helps, key=helps.__getitem__)
    print(f"goal: every --help <= jobs ls: {'met' if helps[worst] <= cli_anchor else 'NOT met'} "
          f"(slowest {worst!r}, {helps[worst] / cli_anchor:.2f}x jobs ls)")  # fmt: skip
    if nb_anchor:
        ours = medians["%load_ext jupyter_starverse"]
        met = "met" if ours <= nb_anchor else "NOT met"
        line_ours = statistics.median(in_process["%load_ext jupyter_starverse"])
        line_tb = statistics.median(in_process["%load_ext tensorboard (anchor)"])
        line_met = "met" if line_ours <= line_tb else "NOT met"
        print(f"goal: %load_ext jupyter_starverse <= %load_ext tensorboard: whole process {met} "
              f"({ours / nb_anchor:.2f}x, IPython's start included)")  # fmt: skip
        print(f"      the %load_ext line alone, in the started shell: {line_met} "
              f"({line_ours * 1000:.1f} ms vs {line_tb * 1000:.1f} ms)")  # fmt: skip


if __name__ == "__main__":
    main()
