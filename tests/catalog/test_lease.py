"""The NFS-safe lease: exclusive, renewable, taken over when stale, fenced when lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from jupyter_starverse.catalog._lease import Lease


def test_only_one_holder(tmp_path: Path) -> None:
    a, b = Lease(tmp_path / "x.lease", ttl=30), Lease(tmp_path / "x.lease", ttl=30)
    assert a.try_acquire()
    assert not b.try_acquire()
    a.release()
    assert b.try_acquire()
    assert not (tmp_path / "x.lease.tmp").exists()


def test_expired_lease_is_taken_over_and_old_owner_learns_it(tmp_path: Path) -> None:
    a, b = Lease(tmp_path / "x.lease", ttl=0.3), Lease(tmp_path / "x.lease", ttl=0.3)
    assert a.try_acquire()
    time.sleep(0.5)  # a did not renew
    assert b.try_acquire()
    assert not a.renew()
    assert a.lost.is_set()
    a.release()  # must not remove b's lease
    assert b.holder() is not None and b.holder().token == b.token  # type: ignore[union-attr]


def test_renewing_keeps_the_lease_alive(tmp_path: Path) -> None:
    a, b = Lease(tmp_path / "x.lease", ttl=0.3), Lease(tmp_path / "x.lease", ttl=0.3)
    assert a.try_acquire()
    with a.renewing():
        time.sleep(0.8)
        assert not b.try_acquire()
    assert a.held


def test_a_short_lease_is_renewed_in_time_while_the_renewer_sleeps(tmp_path: Path) -> None:
    """The shared renewer sleeps up to a second; a lease with a 0.3 s TTL added meanwhile wakes it."""
    warm = Lease(tmp_path / "warm.lease", ttl=30)
    assert warm.try_acquire()
    with warm.renewing():
        time.sleep(0.05)  # the renewer thread runs and sleeps towards a due time 10 s away
    a, b = Lease(tmp_path / "x.lease", ttl=0.3), Lease(tmp_path / "x.lease", ttl=0.3)
    assert a.try_acquire()
    with a.renewing():
        time.sleep(0.8)
        assert not b.try_acquire()
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


def test_garbage_lease_file_is_eventually_stale(tmp_path: Path) -> None:
    path = tmp_path / "x.lease"
    path.write_text("{not json")
    old = time.time() - 10
    os.utime(path, (old, old))
    assert Lease(path, ttl=30).try_acquire()


RACER = """
import sys, time
from pathlib import Path
from jupyter_starverse.catalog._lease import Lease
path, go = Path(sys.argv[1]), Path(sys.argv[2])
lease = Lease(path, ttl=30)
Path(f"{go}.ready.{__import__('os').getpid()}").touch()
while not go.exists():
    pass
won = lease.try_acquire()
time.sleep(0.5)
print(int(won and lease.renew()))
"""


def test_many_processes_taking_over_one_stale_lease_leave_one_holder(tmp_path: Path) -> None:
    path, go = tmp_path / "x.lease", tmp_path / "go"
    path.write_text(
        json.dumps({"token": "dead", "host": "elsewhere", "pid": 1, "renewed_at": time.time() - 100, "ttl": 30})
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
