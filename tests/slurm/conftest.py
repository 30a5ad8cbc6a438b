"""A real Slurm cluster for the tests of this folder: munged, slurmctld and two slurmd (n1, n2).

Started once per session from a temp folder (its own config, munge key and socket, free
ports, state and spool under tmp) and stopped by pid at the end. Without the programs the
tests that need it are skipped, saying what to install.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from jupyter_starverse._settings import Settings
from jupyter_starverse.backends.slurm import SlurmBackend

from ._cluster import APT_HINT, SlurmCluster, missing_programs, start_cluster


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    missing = missing_programs()
    if missing:
        pytest.skip(f"Slurm is not installed here (no {', '.join(missing)}): {APT_HINT}")
    started = time.monotonic()
    cluster = start_cluster(tmp_path_factory.mktemp("slurm"))
    print(f"\nSlurm test cluster up in {time.monotonic() - started:.1f} s: {cluster.root}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster, settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmBackend]:
    """The Slurm backend on the test cluster; no job of a test outlives it, every node is back up."""
    for key, value in slurm_cluster.env.items():
        monkeypatch.setenv(key, value)
    backend = SlurmBackend(settings, cancel_grace=15.0, poll=0.2)
    yield backend
    for job in backend.list():
        sid = backend.slurm_id(job.id)
        if sid and not job.state.finished:
            slurm_cluster.run("scancel", sid, check=False)
    for node in slurm_cluster.nodes:
        if slurm_cluster.node_states().get(node, "").rstrip("*") in ("down", "drained", "draining"):
            slurm_cluster.run("scontrol", "update", f"nodename={node}", "state=resume", check=False)
    slurm_cluster.wait_idle(timeout=60)
