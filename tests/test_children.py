"""The child-process service: real tiny Python children started, found, stopped, idle-exited, stopped at exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from jupyter_starverse._children import ChildNotReady, Children, free_port, port_open
from jupyter_starverse._procs import pid_alive

ROOT = Path(__file__).resolve().parents[1]

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]
#: Ignores SIGTERM (says so on stdout once the handler is in), so only SIGKILL ends it.
STUBBORN = [sys.executable, "-c",
            "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('armed', flush=True); "
            "time.sleep(120)"]  # fmt: skip
#: Serves on the port in argv[1] (what a TensorBoard or an endpoint is to the service).
LISTENER = [sys.executable, "-c",
            "import socket, sys, time; s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); "
            "time.sleep(120)"]  # fmt: skip


def _gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_start_find_and_stop_a_real_child() -> None:
    kids = Children("sleeper")
    child = kids.start("a", SLEEPER)
    try:
        assert child.alive and pid_alive(child.pid)
        assert kids.find("a") is child and kids.keys() == ["a"]
        assert kids.find("b") is None
        assert kids.stop("a") is True
        assert child.returncode is not None and not pid_alive(child.pid)  # reaped: no zombie left
        assert kids.find("a") is None and kids.stop("a") is False
    finally:
        kids.stop_all()


def test_a_child_that_exits_is_forgotten_and_a_key_holds_one_child() -> None:
    kids = Children("quick")
    done = kids.start("k", [sys.executable, "-c", "pass"])
    done.proc.wait(30)
    assert kids.find("k") is None  # exited on its own: not found, forgotten
    first = kids.start("k", SLEEPER)
    second = kids.start("k", SLEEPER)  # the same key again: the first is stopped, never leaked
    try:
        assert first.returncode is not None and not pid_alive(first.pid)
        assert kids.find("k") is second and second.alive
    finally:
        kids.stop_all()


def test_start_waits_for_readiness_and_says_when_the_child_exits_first(tmp_path: Path) -> None:
    kids = Children("listener")
    port = free_port()
    child = kids.start("srv", [*LISTENER, str(port)], port=port, ready=lambda c: port_open(c.port or 0), timeout=30)
    try:
        assert port_open(port) and child.port == port
    finally:
        child.stop()
    with pytest.raises(ChildNotReady) as exited:
        kids.start("bad", [sys.executable, "-c", "raise SystemExit(3)"], ready=lambda c: False, timeout=30)
    assert exited.value.returncode == 3 and "exited with code 3" in str(exited.value)
    with pytest.raises(ChildNotReady) as late:
        kids.start("slow", SLEEPER, ready=lambda c: False, timeout=0.5)
    assert late.value.returncode is None and kids.find("slow") is None  # stopped, not left running


def test_idle_exit_stops_a_child_nobody_touched_and_spares_one_in_use() -> None:
    kids = Children("idle", reap_every=0.05)
    idle = kids.start("idle", SLEEPER, idle_seconds=0.5)
    used = kids.start("used", SLEEPER, idle_seconds=0.5)
    kept = kids.start("kept", SLEEPER)  # no idle time: never reaped
    try:
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            kids.find("used")  # a use: its idle time starts again
            time.sleep(0.05)
        assert _gone(idle.pid) and idle.returncode is not None
        assert used.alive and kept.alive
        assert kids.find("idle") is None and sorted(kids.keys()) == ["kept", "used"]
        assert _gone(used.pid, within=5.0)  # left alone now: it goes too
    finally:
        kids.stop_all()
    assert not kept.alive


def test_stop_kills_a_child_that_ignores_sigterm_after_the_grace() -> None:
    kids = Children("stubborn")
    child = kids.start("s", STUBBORN, stdout=subprocess.PIPE, grace=0.5)
    assert child.proc.stdout is not None and child.proc.stdout.readline().strip() == b"armed"
    began = time.monotonic()
    assert child.stop() is True
    took = time.monotonic() - began
    assert child.returncode == -9 and 0.4 <= took < 5  # SIGTERM ignored: SIGKILL after the grace


def test_a_child_that_ends_on_eof_is_stopped_by_closing_its_stdin_not_by_a_signal() -> None:
    kids = Children("reader")
    child = kids.start("r", [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                       ends_on_eof=True, grace=10)  # fmt: skip
    assert child.stop() is True and child.returncode == 0


_EXIT_PROBE = """
import json, subprocess, sys, time
from jupyter_starverse._children import Children
kids = Children("probe")
plain = kids.start("plain", [sys.executable, "-c", "import time; time.sleep(120)"])
stubborn = kids.start("stubborn", [sys.executable, "-c",
    "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('armed', flush=True); "
    "time.sleep(120)"], stdout=-1, grace=0.5)
stubborn.proc.stdout.readline()
kept = kids.start("kept", [sys.executable, "-c", "import time; time.sleep(120)"], at_exit=False,
                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(json.dumps({"plain": plain.pid, "stubborn": stubborn.pid, "kept": kept.pid}), flush=True)
"""


def test_the_children_are_stopped_when_their_parent_exits_except_those_that_outlive_it() -> None:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(_EXIT_PROBE)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    pids = json.loads(done.stdout.strip().splitlines()[-1])
    try:
        assert _gone(pids["plain"], within=1.0) and _gone(pids["stubborn"], within=1.0)  # stopped before it exited
        assert pid_alive(pids["kept"])  # at_exit=False (a served model): it outlives its parent
    finally:
        try:
            os.kill(pids["kept"], 9)
        except ProcessLookupError:
            pass
