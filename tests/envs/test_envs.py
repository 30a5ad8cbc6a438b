"""Issue 28: the notebook's packages and working folder reach every rank, built once per hash."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from jupyter_starverse.client import Starverse
from jupyter_starverse.envs import JobEnvs
from jupyter_starverse.errors import BadInputError, StoreError
from jupyter_starverse.jobmodel import JobSpec
from tests.backends._local import wait_for

from ._wheels import install_in_notebook, write_wheel

SCRIPT = """
import json, os, pathlib
import svpkg_alpha
data = {"value": svpkg_alpha.VALUE, "cwd": os.getcwd(), "helper": open("helper.txt").read(),
        "env": os.environ.get("STARVERSE_ENV")}
out = pathlib.Path(os.environ["STARVERSE_EXPERIMENT_DIR"]) / f"seen{os.environ['RANK']}.json"
out.write_text(json.dumps(data))
"""


@pytest.fixture
def notebook(tmp_path: Path) -> list[str]:
    """A kernel's sys.path with svpkg_alpha installed into a folder the job's Python does not see."""
    wheels = tmp_path / "wheels"
    site = tmp_path / "kernel-site"
    install_in_notebook(site, write_wheel(wheels, "svpkg_alpha", "1.2"))
    return [*sys.path, str(site)]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "train.py").write_text(SCRIPT)
    (folder / "helper.txt").write_text("from the workdir")
    (folder / "outputs").mkdir()
    (folder / "outputs" / "big.bin").write_bytes(b"x" * 4096)
    (folder / ".starverseignore").write_text("outputs/\n")
    return folder


def _client(settings, kernel_path: list[str]) -> Starverse:  # type: ignore[no-untyped-def]
    client = Starverse(settings)
    client.__dict__["envs"] = JobEnvs(settings, kernel_path=kernel_path)
    return client


def _run(client: Starverse, project: Path, name: str) -> tuple[list[dict[str, str]], JobSpec]:
    spec = JobSpec(name=name, script=str(project / "train.py"), procs_per_node=2, env_from="notebook",
                   workdir=str(project))  # fmt: skip
    job = client.launch(spec, backend="local")
    done = client.backend("local").wait(job.id, timeout=180)
    assert done.state.value == "succeeded", (done.reason, list(client.backend("local").logs(job.id)))
    run = Path(done.experiment_dir)
    return [json.loads((run / f"seen{r}.json").read_text()) for r in range(2)], done.spec


def test_capture_diffs_the_kernel_against_the_jobs_python(settings, notebook) -> None:  # type: ignore[no-untyped-def]
    lock, _ = JobEnvs(settings, kernel_path=notebook).lock("notebook", f"python:{sys.executable}")
    assert lock.requirements == ("svpkg_alpha==1.2",)  # only what the job's Python lacks; Jupyter and torch not
    same, _ = JobEnvs(settings).lock("notebook", f"python:{sys.executable}")
    assert same.empty  # the job's Python is the kernel's: nothing to add


def test_notebook_package_reaches_every_local_rank_and_is_built_once(settings, notebook, project) -> None:  # type: ignore[no-untyped-def]
    client = _client(settings, notebook)
    preview = client.preview(JobSpec(name="p", script=str(project / "train.py"), env_from="notebook",
                                     workdir=str(project)), backend="local")  # fmt: skip
    assert any("installs 1 package(s)" in n and "svpkg_alpha==1.2" in n for n in preview.notes), preview.notes
    assert any("2 file(s)" in n for n in preview.notes) or any("3 file(s)" in n for n in preview.notes)
    seen, spec = _run(client, project, "first")
    assert [s["value"] for s in seen] == ["svpkg_alpha-1.2"] * 2  # the ranks import the notebook's package
    assert all(s["helper"] == "from the workdir" and s["env"] == spec.env_id for s in seen)
    tree = client.envs.paths.workdir_tree(spec.workdir_id or "")
    assert {s["cwd"] for s in seen} == {str(tree)}
    assert not (tree / "outputs").exists()  # .starverseignore
    assert not (tree / "train.py").stat().st_mode & 0o222  # unpacked read-only
    record = client.envs.show(spec.env_id or "")
    assert record.packages == ("svpkg_alpha==1.2",)
    # the second launch with the same packages builds nothing
    before = client.envs.paths.env(spec.env_id or "").stat().st_mtime_ns
    started = time.monotonic()
    _, again = client.envs.resolve(JobSpec(name="x", command=("true",), env_from="notebook"),
                                   f"python:{sys.executable}", build=True)  # fmt: skip
    assert again is not None and again.build is not None and not again.build.built
    assert time.monotonic() - started < 60
    seen2, spec2 = _run(client, project, "second")
    assert spec2.env_id == spec.env_id and seen2[0]["value"] == "svpkg_alpha-1.2"
    assert client.envs.paths.env(spec.env_id or "").stat().st_mtime_ns == before
    assert [r.id for r in client.envs.ls().records] == [spec.env_id]
    assert client.jobs(backend="local")[0].spec.env_id == spec.env_id  # the run folder records the hash


def test_without_the_environment_the_rank_cannot_import(settings, notebook, project) -> None:  # type: ignore[no-untyped-def]
    """What main did: a package of the notebook is missing in the ranks (ModuleNotFoundError)."""
    client = _client(settings, notebook)
    job = client.launch(JobSpec(name="bare", script=str(project / "train.py"), env_from="image"), backend="local")
    done = client.backend("local").wait(job.id, timeout=180)
    assert done.state.value == "failed"
    text = "\n".join(line.text for line in client.backend("local").logs(job.id))
    assert "svpkg_alpha" in text


def test_a_broken_requirement_fails_before_the_job_starts(settings, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    req = tmp_path / "requirements.txt"
    req.write_text("svpkg-does-not-exist==9.9\n")
    client = Starverse(settings)
    spec = JobSpec(name="broken", command=("true",), env_from=str(req))
    with pytest.raises(StoreError) as err:
        client.launch(spec, backend="local")
    assert "svpkg-does-not-exist" in err.value.message and "pip failed" in err.value.message
    assert err.value.hint and "svpkg-does-not-exist" in err.value.hint
    assert client.jobs(backend="local") == []  # nothing started, nothing billed
    assert client.envs.ls().records == ()  # and no half environment on the store


def test_requirements_file_with_a_local_wheel(settings, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    wheels = tmp_path / "wheels"
    write_wheel(wheels, "svpkg_beta", "0.3")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    req = tmp_path / "requirements.txt"
    req.write_text("# pinned\nsvpkg_beta==0.3\ntorch\n")
    plan = JobEnvs(settings).build(str(req))
    assert plan.lock is not None and plan.lock.requirements == ("svpkg_beta==0.3",)  # torch: the image's
    assert any("torch" in n for n in plan.notes)
    assert plan.build is not None and plan.build.record.packages == ("svpkg_beta==0.3",)


def test_workdir_over_the_limit_names_the_biggest_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from jupyter_starverse.envs import pack_workdir

    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "weights.bin").write_bytes(b"0" * 3000)
    (tmp_path / "w" / "small.py").write_text("x = 1\n")
    with pytest.raises(BadInputError) as err:
        pack_workdir(str(tmp_path / "w"), limit=2000)
    assert "weights.bin" in err.value.message and ".starverseignore" in (err.value.hint or "")
    a = pack_workdir(str(tmp_path / "w"))
    b = pack_workdir(str(tmp_path / "w"))
    assert a.id == b.id and a.files == 2  # content-addressed: the same files, the same hash


def test_env_cli_ls_show_rm(settings, notebook, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from jupyter_starverse.cli import main

    envs = JobEnvs(settings, kernel_path=notebook)
    plan = envs.build("notebook")
    env_id = plan.env_id or ""
    assert main(["env", "ls"]) == 0
    assert env_id[:12] in capsys.readouterr().out
    assert main(["env", "show", env_id[:8], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["packages"] == ["svpkg_alpha==1.2"]
    assert main(["env", "rm", env_id[:8]]) == 0
    capsys.readouterr()
    assert envs.ls().records == ()
    assert main(["env", "show", "zzzz"]) != 0


def test_launch_flags_reach_the_spec(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from jupyter_starverse.cli import parse
    from jupyter_starverse.cli._launch import spec_from_launch_args

    script = tmp_path / "t.py"
    script.write_text("")
    args = parse(["launch", str(script), "--env-from", "notebook", "--workdir", str(tmp_path)])
    spec = spec_from_launch_args(args)
    assert (spec.env_from, spec.workdir) == ("notebook", str(tmp_path))
    nb = parse(["launch", str(script)], notebook=True)
    spec = spec_from_launch_args(nb)
    assert (spec.env_from, spec.workdir) == ("notebook", str(tmp_path))  # a notebook's defaults
    assert spec_from_launch_args(parse(["launch", str(script)])).env_from is None
    with pytest.raises(BadInputError):
        JobSpec(name="x", command=("true",), env_id="not-a-hash")


def test_shared_waiters_build_once(settings, notebook) -> None:  # type: ignore[no-untyped-def]
    """Four launches at once (threads of one process, or nodes): one build, every caller gets its record."""
    import concurrent.futures

    envs = JobEnvs(settings, kernel_path=notebook)
    lock, _ = envs.lock("notebook", f"python:{sys.executable}")
    from jupyter_starverse.envs._build import build_env

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: build_env(lock, envs.paths), range(4)))
    assert sum(r.built for r in results) == 1
    assert len({r.record.id for r in results}) == 1
    wait_for(lambda: envs.paths.record(lock.hash).is_file(), timeout=5)
