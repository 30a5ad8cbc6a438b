"""Issue 38, finding 3 in a job: "JOB WRITE INTO MOUNT SUCCEEDED" as root.

A local job's store mounts are read-only bind mounts in the agent's own mount namespace (a user
namespace too for a plain uid), so a write fails with EROFS for root and for a plain uid, while
the ranks still read them and talk over gloo. Without the namespace (``STARVERSE_READONLY_MOUNTS=no``,
or a kernel that refuses) the check after the job names the write in the job's reason, the entry
shows as corrupt and the next launch with it is refused.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_starverse._settings import Settings
from jupyter_starverse.backends.local._local import LocalBackend
from jupyter_starverse.catalog import Catalog
from jupyter_starverse.errors import BadInputError
from jupyter_starverse.jobmodel import JobSpec, JobState
from tests._users import ALICE, ROOT, TEAM, as_root, shared_env

from ._local import _stop_leftover_jobs, logs_text  # noqa: F401 - autouse: no job outlives its test

# Two ranks: each reads the mount, tries to change it three ways, then an all_reduce over gloo.
WRITER = """
import json, os
import torch, torch.distributed as dist
from jupyter_starverse import runtime as sv

ctx = sv.init()
top = json.loads(os.environ["STARVERSE_MOUNTS"])["corpus"]
print("read", open(os.path.join(top, "a.txt")).read().strip(), flush=True)
for what, act in (
    ("append", lambda: open(os.path.join(top, "a.txt"), "a").write("x")),
    ("create", lambda: open(os.path.join(top, f"new-{ctx.rank}.txt"), "w").write("x")),
    ("chmod", lambda: os.chmod(os.path.join(top, "a.txt"), 0o666)),
):
    try:
        act()
        print("JOB WRITE INTO MOUNT SUCCEEDED", what, flush=True)
    except OSError as e:
        print("refused", what, e.strerror, flush=True)
t = torch.ones(1)
dist.all_reduce(t)
print("allreduce", int(t.item()), flush=True)
"""


def _corpus(catalog: Catalog, src: Path) -> Path:
    src.mkdir(parents=True, exist_ok=True)
    (src / "a.txt").write_text("hello\n")
    src.chmod(0o755)
    (src / "a.txt").chmod(0o644)
    catalog.add_dataset("corpus", str(src))
    catalog.pull("corpus")
    return catalog.mount("corpus")


_PROBE = """
import sys
from pathlib import Path
from jupyter_starverse.backends.local._readonly import protect
protect([sys.argv[1]])
try:
    (Path(sys.argv[1]) / "x").write_text("x")
except OSError:
    sys.exit(0)
sys.exit(1)
"""


def _namespaces_work(tmp: Path) -> bool:
    """Whether this kernel lets this uid make a read-only bind (tried in a child process)."""
    probe = tmp / "probe"
    probe.mkdir()
    done = subprocess.run([sys.executable, "-c", _PROBE, str(probe)], capture_output=True, timeout=60)
    return done.returncode == 0 and not (probe / "x").exists()


def _spec() -> JobSpec:
    return JobSpec(name="writer", code=WRITER, nodes=1, procs_per_node=2, mounts=("corpus",))


@pytest.mark.slow
def test_a_jobs_write_into_its_mount_fails_even_as_root(settings: Settings, tmp_path: Path) -> None:
    if not _namespaces_work(tmp_path):
        pytest.skip("this kernel allows no mount namespace here: see the post-job check test")
    catalog = Catalog(settings)
    top = _corpus(catalog, tmp_path / "src")
    backend = LocalBackend(settings)
    job = backend.wait(backend.submit(_spec()).id, timeout=180)
    text = logs_text(backend, job)
    assert job.state is JobState.SUCCEEDED, (job.reason, text)
    assert "JOB WRITE INTO MOUNT SUCCEEDED" not in text, text
    assert text.count("refused append Read-only file system") == 2 and text.count("refused chmod") == 2
    assert text.count("read hello") == 2 and text.count("allreduce 2") == 2  # reads and gloo work inside
    assert (top / "a.txt").read_text() == "hello\n" and not list(top.glob("new-*"))
    assert catalog.check("corpus").ok and job.reason is None
    assert "/data/corpus/" not in Path("/proc/self/mountinfo").read_text()  # nothing leaked out of the job


def _as_alice(code: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str] | None:
    """``code`` as ALICE with an interpreter she can run (and so can the job she starts); None if none.

    The venv's interpreter may lie under a folder only root reaches (a plain uid's supervisor
    could not start it): then the same Python version elsewhere, with the venv's packages.
    """
    packages = os.pathsep.join([str(ROOT), *site.getsitepackages()])
    full = {k: v for k, v in os.environ.items() if not k.startswith(("STARVERSE_", "HF_"))}
    full.update(env, HOME=str(cwd), PYTHONPATH=packages, PYTHONDONTWRITEBYTECODE="1", STARVERSE_USER="alice")
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for python in dict.fromkeys(p for p in (sys.executable, shutil.which(version), f"/usr/bin/{version}") if p):
        argv = ["setpriv", f"--reuid={ALICE}", f"--regid={ALICE}", f"--groups={TEAM}", python, "-c"]
        probe = "import subprocess, sys, torch; subprocess.run([sys.executable, '-c', 'pass'], check=True)"
        if subprocess.run([*argv, probe], env=full, cwd=cwd, capture_output=True).returncode == 0:
            return subprocess.run([*argv, code], env=full, cwd=cwd, capture_output=True, text=True, timeout=240)
    return None


@as_root
@pytest.mark.slow
def test_a_jobs_write_into_its_mount_fails_as_a_plain_uid(shared_tmp: Path) -> None:
    """Alice (no privilege at all) runs the job; her user namespace makes her mounts read-only."""
    env = shared_env(shared_tmp, STARVERSE_HOME=str(shared_tmp / "home-alice"), STARVERSE_MODE="cpu")
    code = f"""
import json
from pathlib import Path
from jupyter_starverse._settings import Settings
from jupyter_starverse.backends.local._local import LocalBackend
from jupyter_starverse.catalog import Catalog
from jupyter_starverse.jobmodel import JobSpec
from tests.backends.test_local_readonly_mounts import WRITER, _corpus, _namespaces_work
from tests.backends._local import logs_text

base = Path({str(shared_tmp)!r})
settings = Settings.from_env()
if not _namespaces_work(base):
    print(json.dumps({{"skip": True}}))
    raise SystemExit(0)
top = _corpus(Catalog(settings), base / "src")
backend = LocalBackend(settings)
spec = JobSpec(name="writer", code=WRITER, nodes=1, procs_per_node=2, mounts=("corpus",))
job = backend.wait(backend.submit(spec).id, timeout=180)
print(json.dumps({{"state": job.state.value, "reason": job.reason, "log": logs_text(backend, job),
                  "text": (top / "a.txt").read_text(), "ok": Catalog(settings).check("corpus").ok}}))
"""
    proc = _as_alice(code, env, shared_tmp)
    if proc is None:
        pytest.skip("no Python interpreter here that a plain uid may run")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if out.get("skip"):
        pytest.skip("this kernel allows no user namespace for a plain uid: see the post-job check test")
    assert out["state"] == "succeeded", out
    log = out["log"]
    assert "JOB WRITE INTO MOUNT SUCCEEDED" not in log, log
    assert log.count("refused append") == 2 and log.count("allreduce 2") == 2  # 0444 or EROFS, whichever first
    # the owner may chmod her own file and write into her own folder: only the read-only bind stops that
    assert log.count("refused chmod Read-only file system") == 2
    assert log.count("refused create Read-only file system") == 2
    assert out["text"] == "hello\n" and out["ok"] and out["reason"] is None


@pytest.mark.slow
def test_without_the_namespace_a_write_is_reported_after_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STARVERSE_READONLY_MOUNTS", "no")  # what a kernel without namespaces gives
    settings = Settings.from_env()
    catalog = Catalog(settings)
    top = _corpus(catalog, tmp_path / "src")
    backend = LocalBackend(settings)
    job = backend.wait(backend.submit(_spec()).id, timeout=180)
    text = logs_text(backend, job)
    assert "JOB WRITE INTO MOUNT SUCCEEDED append" in text  # root ignores the 0444: the finding
    assert job.state is JobState.SUCCEEDED
    assert job.reason is not None and "warning: files of the job's mounts changed" in job.reason
    assert "corpus@1" in job.reason and "a.txt" in job.reason and "store pull corpus@1" in job.reason
    status = catalog.status("corpus")
    assert status.state == "corrupt" and "a.txt" in (status.problem or "")
    with pytest.raises(BadInputError, match=r"a\.txt"):  # the next job's start refuses it
        backend.submit(_spec())
    assert (top / "a.txt").read_text().startswith("hello")
    catalog.pull("corpus")  # the owner repairs it
    assert catalog.check("corpus").ok and (top / "a.txt").read_text() == "hello\n"
