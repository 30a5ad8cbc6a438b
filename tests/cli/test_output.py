"""Terminal output: exact documents on stdout, notes on stderr, NDJSON streams, quiet pipes,
group usage, display names, impossible requests refused, one job list across backends."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from jupyter_starverse._settings import Settings
from jupyter_starverse.cli import main as cli_main
from jupyter_starverse.client import Starverse
from jupyter_starverse.errors import BackendUnavailableError
from jupyter_starverse.jobmodel import JobSpec

from ..widgets._jobs import quick_job


def test_dry_run_stdout_is_exactly_the_document(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["launch", "--nodes", "2", "--steps", "5", "--dry-run", "-o", "json"]) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)  # no `# cost:` comment in the way
    assert isinstance(data, dict)
    assert "# cost:" in err
    assert cli_main(["launch", "--steps", "5", "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert not out.lstrip().startswith("#") and yaml.safe_load(out)["nodes"]
    assert "# cost:" in err


def test_several_json_objects_become_a_v1_list() -> None:
    from jupyter_starverse.client import LaunchPreview

    doc = json.loads(LaunchPreview("json", json.dumps([{"kind": "Service"}, {"kind": "Job"}]), None).document)
    assert doc == {"apiVersion": "v1", "kind": "List", "items": [{"kind": "Service"}, {"kind": "Job"}]}


def test_json_log_stream_is_ndjson_and_groups_print_their_usage(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    job = quick_job(settings).id
    assert cli_main(["jobs", "logs", job, "--json"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) >= 5 and all(json.loads(line)["text"] is not None for line in lines)
    assert cli_main(["store"]) == 0  # a group prints its usage (`jobs` alone lists the jobs: issue 27)
    out = capsys.readouterr().out
    assert out.startswith("usage: starverse store") and "pull" in out
    assert cli_main(["jobs"]) == 0
    assert job in capsys.readouterr().out


def test_broken_pipe_ends_quietly(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    class Closed(io.StringIO):
        def write(self, s: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", Closed())
    assert cli_main(["info"]) == 141


def test_pipe_to_head_has_no_traceback(settings: Settings) -> None:
    job = quick_job(settings).id
    proc = subprocess.run(
        f"{sys.executable} -m jupyter_starverse.cli jobs logs {job} | head -1",
        shell=True, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.stdout.count("\n") == 1 and "Traceback" not in proc.stderr


def test_any_display_name_gives_a_valid_stable_id(settings: Settings) -> None:
    for display in ("Big_Run.v1", "my run", "训练-模型", "My Train_v2"):
        spec = JobSpec(name=display, script="train.py")
        assert spec.display_name == display and spec.title == display
        assert spec.name == JobSpec(name=display, script="train.py").name  # deterministic
        assert len(spec.name) <= 63 and all(c.isascii() and (c.isalnum() or c == "-") for c in spec.name)
        assert spec.name == spec.name.lower()
        assert JobSpec.from_json(spec.to_json()) == spec
    assert JobSpec(name="ok-run", script="t.py").display_name is None
    assert JobSpec(name="训练-模型", script="t.py").name != JobSpec(name="测试-模型", script="t.py").name


def test_display_name_is_shown_by_jobs_ls_and_show(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    job = quick_job(settings, name="Big_Run.v1").id
    assert cli_main(["jobs", "ls"]) == 0
    assert "Big_Run.v1" in capsys.readouterr().out
    assert cli_main(["jobs", "show", job]) == 0
    assert "Big_Run.v1" in capsys.readouterr().out


def test_cpu_with_gpus_per_node_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["launch", "--gpu", "cpu", "--gpus-per-node", "8", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "--gpus-per-node" in err and "--procs 8" in err


def test_train_is_marked_notebook_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "(notebook only)" in out


def test_mode_gpu_without_a_gpu_warns(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STARVERSE_WORKSPACE", "local")
    monkeypatch.setenv("STARVERSE_LOCAL_GPU", "no")
    assert cli_main(["mode", "gpu", "--dry-run"]) == 4  # jobs would run here: refused (tests/modes/test_no_gpu.py)
    assert "GPU mode needs a GPU" in capsys.readouterr().err
    monkeypatch.setenv("STARVERSE_BACKEND", "slurm")
    assert cli_main(["mode", "gpu", "--dry-run"]) == 0
    assert "warning: this machine has no GPU" in capsys.readouterr().out


def test_one_job_list_across_backends(settings: Settings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    job = quick_job(settings).id
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))  # configured, but nothing answers
    client = Starverse(settings)
    assert "kubernetes" in client.job_backends()

    class Down:
        name = "kubernetes"

        def list(self) -> list[object]:
            raise BackendUnavailableError("no cluster", hint="check KUBECONFIG")

        def get(self, job_id: str) -> object:
            raise BackendUnavailableError("no cluster")

    real = client.backend
    monkeypatch.setattr(client, "backend", lambda name=None, **kw: Down() if name == "kubernetes" else real(name, **kw))
    found = client.list_jobs()
    assert [j.id for j in found.jobs] == [job] and any("kubernetes" in n for n in found.notes)
    assert client.attach(job).id == job
    assert [j.id for j in client.jobs(backend="local")] == [job]
