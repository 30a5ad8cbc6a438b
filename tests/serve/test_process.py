"""The process service (serve/_process.py) on the Children service: what it records, what it stops and reaps,
what outlives this process, and a process another one started, stopped here by its recorded pid."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from jupyter_starverse._procs import pid_alive
from jupyter_starverse.serve import Processes
from jupyter_starverse.serve._process import SERVED

ROOT = Path(__file__).resolve().parents[2]
_SLEEP = [sys.executable, "-c", "import sys, time; print('up', flush=True); time.sleep(120)"]


def _gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return not pid_alive(pid)


def _reaped(pid: int) -> bool:
    """No zombie of ``pid`` is left for this process to reap."""
    try:
        return os.waitpid(pid, os.WNOHANG) == (0, 0) and not pid_alive(pid)
    except ChildProcessError:
        return True


def test_a_started_process_is_recorded_and_stop_ends_and_reaps_it(tmp_path: Path) -> None:
    procs = Processes(tmp_path / ".serve", "serve")
    f = procs.new("Tiny Model", {"model": "tiny"})
    rec = procs.start(f, _SLEEP)
    child = SERVED.find(str(f.root.absolute()), touch=False)
    assert child is not None and child.pid == rec.pid and not child.at_exit
    assert f.record() == rec and f.alive() is True
    assert procs.folder(f.id).spec.is_file() and oct(f.root.stat().st_mode & 0o777) == "0o700"
    deadline = time.monotonic() + 10
    while "up" not in f.log_tail() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert f.log_tail() == "up"  # its output goes to the folder's log
    SERVED.stop_all(at_exit_only=True)  # what runs at exit: a served process outlives this one
    assert f.alive() is True
    assert procs.stop(f, grace=5.0) is True
    assert not pid_alive(rec.pid) and _reaped(rec.pid)
    assert SERVED.find(str(f.root.absolute())) is None
    stopped = f.read("stopped.json")
    assert stopped["reason"] == "stopped" and stopped["was_running"] is True
    assert procs.stop(f) is False and f.read("stopped.json") == stopped  # a second stop changes nothing


def test_one_that_exited_on_its_own_is_reaped_at_stop(tmp_path: Path) -> None:
    procs = Processes(tmp_path / ".serve", "serve")
    f = procs.new("quick", {})
    rec = procs.start(f, [sys.executable, "-c", "raise SystemExit(3)"])
    assert _gone(rec.pid)
    assert procs.stop(f, reason="exited before it served") is False
    assert _reaped(rec.pid)
    assert f.read("stopped.json")["reason"] == "exited before it served"


def test_a_stubborn_one_is_killed_after_the_grace(tmp_path: Path) -> None:
    procs = Processes(tmp_path / ".serve", "serve")
    f = procs.new("stubborn", {})
    argv = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('armed', flush=True); time.sleep(120)"]  # fmt: skip
    rec = procs.start(f, argv)
    deadline = time.monotonic() + 10
    while "armed" not in f.log_tail() and time.monotonic() < deadline:
        time.sleep(0.05)
    started = time.monotonic()
    assert procs.stop(f, grace=0.5) is True
    assert time.monotonic() - started < 5 and _reaped(rec.pid)


_OTHER = """
import json, sys
from pathlib import Path
from jupyter_starverse.serve import Processes
procs = Processes(Path(sys.argv[1]), "serve")
f = procs.new("other", {})
rec = procs.start(f, [sys.executable, "-c", "import time; time.sleep(120)"])
print(json.dumps({"id": f.id, "pid": rec.pid}), flush=True)
"""


def test_one_started_by_another_process_outlives_it_and_is_stopped_here_by_its_pid(tmp_path: Path) -> None:
    root = tmp_path / ".serve"
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(_OTHER), str(root)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    started = json.loads(done.stdout.strip().splitlines()[-1])
    try:
        assert pid_alive(started["pid"])  # its parent exited: it runs on
        procs = Processes(root, "serve")
        f = procs.folder(started["id"])
        assert f.alive() is True and SERVED.find(str(f.root.absolute())) is None
        assert procs.stop(f, grace=5.0) is True
        assert _gone(started["pid"])
        assert f.read("stopped.json")["was_running"] is True
    finally:
        try:
            os.kill(started["pid"], signal.SIGKILL)
        except ProcessLookupError:
            pass
