"""The NFS-safe lease: exclusive, renewable, taken over when stale, fenced when lost."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jupyter_starverse.catalog._lease import Lease


def test_only_one_holder(tmp_path: Path) -> None:
    a, b = Lease(tmp_path / "x.lease", ttl=30), Lease(tmp_path / "x.lease", ttl=30)
    assert a.try_acquire()
    assert not b.try_acquire()
    a.release()
    assert b.try_acquire()
    assert not (tmp_path / "x.lease.tmp").exists()


def _watch(lease: Lease, seconds: float) -> bool:
    """Poll ``try_acquire`` for ``seconds`` (as waiters do): True once it takes the lease."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if lease.try_acquire():
            return True
        time.sleep(0.02)
    return False


def test_expired_lease_is_taken_over_and_old_owner_learns_it(tmp_path: Path) -> None:
    a, b = Lease(tmp_path / "x.lease", ttl=0.3), Lease(tmp_path / "x.lease", ttl=0.3)
    assert a.try_acquire()
    assert not b.try_acquire()  # b starts watching a's renewal counter
    time.sleep(0.4)  # a did not renew for a TTL of b's clock
    assert b.try_acquire()
    assert b.fence == a.fence + 1
    assert not a.renew()
    assert a.lost.is_set()
    a.release()  # must not remove b's lease
    assert b.holder() is not None and b.holder().token == b.token  # type: ignore[union-attr]


def test_renewing_keeps_the_lease_alive(tmp_path: Path) -> None:
    a, b = Lease(tmp_path / "x.lease", ttl=0.6), Lease(tmp_path / "x.lease", ttl=0.6)
    assert a.try_acquire()
    with a.renewing():
        assert not _watch(b, 1.5)
    assert a.held


def test_a_short_lease_is_renewed_in_time_while_the_renewer_sleeps(tmp_path: Path) -> None:
    """The shared renewer sleeps up to a second; a lease with a 0.6 s TTL added meanwhile wakes it."""
    warm = Lease(tmp_path / "warm.lease", ttl=30)
    assert warm.try_acquire()
    with warm.renewing():
        time.sleep(0.05)  # the renewer thread runs and sleeps towards a due time 10 s away
    a, b = Lease(tmp_path / "x.lease", ttl=0.6), Lease(tmp_path / "x.lease", ttl=0.6)
    assert a.try_acquire()
    with a.renewing():
        assert not _watch(b, 1.5)
    warm.release()


def test_lease_of_a_dead_process_on_this_host_is_stale_at_once(tmp_path: Path) -> None:
    path = tmp_path / "x.lease"
    code = (
        "import sys; from pathlib import Path; from jupyter_starverse.catalog._lease import Lease;"
        f"l = Lease(Path({str(path)!r}), ttl=3600); assert l.try_acquire()"
    )
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": str(root)})
    assert json.loads(path.read_text())["ttl"] == 3600
    assert Lease(path, ttl=3600).try_acquire()


def test_garbage_lease_file_is_stale_once_it_stood_still_for_a_ttl(tmp_path: Path) -> None:
    path = tmp_path / "x.lease"
    path.write_text("{not json")
    lease = Lease(path, ttl=0.3)
    assert not lease.try_acquire()  # its age says nothing: whose clock wrote the mtime?
    assert _watch(lease, 2.0)


RACER = """
import sys, time
from pathlib import Path

import pytest
from jupyter_starverse.catalog._lease import Lease
path, go = Path(sys.argv[1]), Path(sys.argv[2])
lease = Lease(path, ttl=30)
Path(f"{go}.ready.{__import__('os').getpid()}").touch()
while not go.exists():
    pass
deadline = time.monotonic() + 1.5
won = False
while not won and time.monotonic() < deadline:
    won = lease.try_acquire()
    time.sleep(0.01)
time.sleep(max(0.0, deadline - time.monotonic()) + 0.3)
print(int(won and lease.renew()))
"""


def test_many_processes_taking_over_one_stale_lease_leave_one_holder(tmp_path: Path) -> None:
    path, go = tmp_path / "x.lease", tmp_path / "go"
    path.write_text(
        json.dumps({"token": "dead", "process": {"pid": 1, "host": "elsewhere"}, "renewals": 3, "fence": 7, "ttl": 0.3})
    )
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    procs = [
        subprocess.Popen([sys.executable, "-c", RACER, str(path), str(go)], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(8)
    ]
    while len(list(tmp_path.glob("go.ready.*"))) < 8:
        time.sleep(0.02)
    go.touch()
    holders = sum(int(p.communicate(timeout=60)[0].strip()) for p in procs)
    assert holders == 1
    assert json.loads(path.read_text())["token"] != "dead"
    assert json.loads(path.read_text())["fence"] == 8


SKEWED_HOLDER = """
import sys, time
from pathlib import Path

import pytest
real = time.time
time.time = lambda: real() + float(sys.argv[2])  # this host's wall clock is off
from jupyter_starverse.catalog._lease import Lease
lease = Lease(Path(sys.argv[1]), ttl=0.6)
assert lease.try_acquire()
with lease.renewing():
    print("held", flush=True)
    time.sleep(600)
"""


@pytest.mark.parametrize("skew", [-60.0, 60.0])
def test_a_holder_whose_clock_is_off_keeps_its_live_lease_and_loses_it_when_dead(tmp_path: Path, skew: float) -> None:
    """Issue 38: staleness came from the holder's wall clock against the reader's (20 s of skew took a live
    lease); now the reader watches the renewal counter on its own monotonic clock."""
    path = tmp_path / "x.lease"
    root = Path(__file__).resolve().parents[2]
    holder = subprocess.Popen(
        [sys.executable, "-c", SKEWED_HOLDER, str(path), str(skew)],
        env={**os.environ, "PYTHONPATH": str(root)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        other = Lease(path, ttl=0.6)
        assert not _watch(other, 1.5)  # three TTLs of a live holder: never taken
        holder.kill()
        holder.wait()
        assert other.try_acquire()  # a dead process of this host: at once
    finally:
        holder.kill()
        holder.wait()


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("differs", ["boot_id", "pid_ns"])
def test_two_hosts_sharing_a_host_name_do_not_judge_each_others_pids(tmp_path: Path, differs: str) -> None:
    """Issue 38: containers (or a re-imaged node) with one host name: the holder's pid means nothing here,
    so a pid that is not running here does not make its live lease stale; its standing counter does."""
    path = tmp_path / "x.lease"
    holder = Lease(path, ttl=0.6)
    holder.record = dataclasses.replace(holder.record, pid=_dead_pid(), **{differs: "elsewhere"})
    assert holder.try_acquire()
    other = Lease(path, ttl=0.6)
    with holder.renewing():
        assert not _watch(other, 1.5)
    # the holder stopped renewing (its node froze): taken after a TTL of the reader's clock
    assert _watch(other, 2.0)
    assert not holder.renew()


def test_a_reused_pid_of_this_host_is_a_dead_holder(tmp_path: Path) -> None:
    """Liveness is pid + start time: a record whose pid runs but started at another time is gone."""
    path = tmp_path / "x.lease"
    holder = Lease(path, ttl=3600)
    assert holder.record.start_time is not None
    holder.record = dataclasses.replace(holder.record, start_time=holder.record.start_time - 1)
    assert holder.try_acquire()
    assert Lease(path, ttl=3600).try_acquire()


def test_a_holder_whose_lease_was_taken_over_cannot_publish(tmp_path: Path) -> None:
    """Issue 38: renew (the check before a publication) was check-then-act without a fence. A holder that
    was paused for a TTL is refused: its lease names another fence now, and 3/4 of a TTL without a good
    renewal is refused by the holder itself even before anyone took it."""
    a, b = Lease(tmp_path / "x.lease", ttl=0.4), Lease(tmp_path / "x.lease", ttl=0.4)
    assert a.try_acquire() and a.fence == 1
    assert _watch(b, 2.0)
    assert b.fence == 2
    assert not a.renew() and a.lost.is_set()
    assert b.renew()
    time.sleep(0.35)  # b itself paused past 3/4 of its TTL: it may have been watched for a TTL meanwhile
    assert not b.renew()


def test_a_released_lease_is_not_written_again_by_a_late_renewal(tmp_path: Path) -> None:
    a = Lease(tmp_path / "x.lease", ttl=30)
    assert a.try_acquire()
    a.release()
    assert not a.renew()
    assert not (tmp_path / "x.lease").exists()
