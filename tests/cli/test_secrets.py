"""``--secret NAME=REF``: a secret reaches the job's processes, and its value is written nowhere.

Issue 34 (secrets): before, the only way was ``--env``, whose values land in ``spec.json``,
``plan.json``, the Kubernetes manifest, the sbatch script and REST answers. Every test here
greps what a run wrote (or what a render printed) for the value.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from jupyter_starverse._settings import Settings
from jupyter_starverse.backends.slurm import SlurmBackend
from jupyter_starverse.backends.slurm import _backend as slurm_backend
from jupyter_starverse.cli import main as cli_main
from jupyter_starverse.cli import parse
from jupyter_starverse.client import Starverse
from jupyter_starverse.errors import BadInputError
from jupyter_starverse.jobmodel import JobSpec, JobState, secret_env_warnings
from tests.backends._local import wait_for

SECRET = "hf_Zq81xLmR27vPkTa9WcYe4sNd"  # what must appear in no file, render or answer
SEEN = """
import hashlib, os, pathlib
value = os.environ.get("HF_TOKEN")
seen = hashlib.sha256(value.encode()).hexdigest() if value else "missing"
pathlib.Path(os.environ["STARVERSE_EXPERIMENT_DIR"], "seen-" + os.environ["RANK"]).write_text(seen)
"""


def _grep(root: Path, value: str = SECRET) -> list[str]:
    """Every file under ``root`` whose bytes hold ``value``."""
    return [str(p) for p in root.rglob("*") if p.is_file() and value.encode() in p.read_bytes()]


def _launch_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any, str]:
    code = cli_main(["launch", *argv, "--json"])
    out = capsys.readouterr()
    return code, (json.loads(out.out) if code == 0 else None), out.err


def test_a_secret_by_env_reaches_every_rank_and_no_file_of_the_run(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_HF_TOKEN", SECRET)
    script = tmp_path / "seen.py"
    script.write_text(SEEN)
    code, job, err = _launch_json(capsys, str(script), "--procs", "2", "--secret", "HF_TOKEN=env:MY_HF_TOKEN")
    assert code == 0, err
    assert job["spec"]["secrets"] == {"HF_TOKEN": "env:MY_HF_TOKEN"}
    backend = Starverse(settings).backend("local")
    done = backend.wait(job["id"], timeout=120)
    assert done.state is JobState.SUCCEEDED, done.reason
    run = Path(done.experiment_dir)
    digest = hashlib.sha256(SECRET.encode()).hexdigest()
    assert [(run / f"seen-{r}").read_text() for r in (0, 1)] == [digest, digest]  # both ranks got it
    assert (run / "spec.json").exists() and (run / "plan.json").exists()
    assert _grep(run) == []  # spec, plan, status, logs, supervisor log: only the reference
    assert SECRET not in json.dumps(done.to_json())
    assert cli_main(["jobs", "show", job["id"], "--json"]) == 0
    assert SECRET not in capsys.readouterr().out


def test_a_secret_file_must_be_private_and_is_resolved_only_at_start(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token = tmp_path / "hf_token"
    token.write_text(SECRET + "\n")
    token.chmod(0o644)
    code, _, err = _launch_json(capsys, "--secret", f"HF_TOKEN=file:{token}", "--dry-run", "-o", "json")
    assert code == 2 and "can be read by others" in err and f"chmod 600 {token}" in err and SECRET not in err
    token.chmod(0o600)
    code, preview, err = _launch_json(capsys, "--secret", f"HF_TOKEN=file:{token}", "--dry-run", "-o", "json")
    assert code == 0, err
    assert SECRET not in json.dumps(preview)
    link = tmp_path / "link"
    link.symlink_to(token)
    code, _, err = _launch_json(capsys, "--secret", f"HF_TOKEN=file:{link}", "--dry-run")
    assert code == 2 and "symbolic link" in err
    code, _, err = _launch_json(capsys, "--secret", "HF_TOKEN=env:NOT_SET_ANYWHERE", "--dry-run")
    assert code == 2 and "NOT_SET_ANYWHERE is not set" in err and "export NOT_SET_ANYWHERE" in err


def test_a_relative_secret_file_becomes_absolute_and_a_value_is_refused_unechoed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    args = parse(["launch", "--secret", "A=file:tok", "--secret", "B=env:B_VAR", "--secret", "C=hf/token", "--dry-run"])
    assert dict(args.secret) == {"A": f"file:{tmp_path / 'tok'}", "B": "env:B_VAR", "C": "hf/token"}
    assert cli_main(["launch", "--secret", f"HF_TOKEN={SECRET}", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "not the secret itself" in err and SECRET not in err
    with pytest.raises(BadInputError) as e:  # the same through the API and REST (JobSpec.from_json)
        JobSpec.from_json({"name": "x", "code": "pass", "secrets": {"HF_TOKEN": SECRET}})
    assert SECRET not in str(e.value) and "env:VAR" in (e.value.hint or "")


def test_env_values_that_look_secret_are_warned_about(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = {"WANDB_API_KEY": "x", "HF_TOKEN": "y", "DB_PASSWORD": "z", "RANDOM": "Xk29fQp7LzA1mW8eRt5YbN", "LR": "0.1",
           "TOKENIZER": "gpt2", "DATA": "/data/set/one", "NAME": "aaaaaaaaaaaaaaaaaaaaaaaa"}  # fmt: skip
    named = {w.split()[1] for w in secret_env_warnings(env)}
    assert named == {"WANDB_API_KEY", "HF_TOKEN", "DB_PASSWORD", "RANDOM"}
    code = cli_main(["launch", "--env", f"HF_TOKEN={SECRET}", "--env", "LR=0.1", "--dry-run", "-o", "json", "--json"])
    out = capsys.readouterr()
    assert code == 0
    [warning] = json.loads(out.out)["warnings"]
    assert "--env HF_TOKEN looks like a secret" in warning and "--secret HF_TOKEN=env:HF_TOKEN" in warning
    assert SECRET not in warning
    assert cli_main(["launch", "--env", f"HF_TOKEN={SECRET}", "--dry-run"]) == 0
    assert "warning: --env HF_TOKEN looks like a secret" in capsys.readouterr().err  # a dry run's notes: stderr


def test_kubernetes_reads_a_secret_by_secret_key_ref_and_refuses_local_references(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_HF_TOKEN", SECRET)
    args = parse(["launch", "--backend", "kubernetes", "--dry-run", "--secret", "HF_TOKEN=hf-secret/token"])
    rendered = args.run(Starverse(settings), args).rendered
    [job] = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Job"]
    [main] = [c for c in job["spec"]["template"]["spec"]["containers"] if c["name"] == "trainer"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-secret", "key": "token"}}} in main["env"]
    for ref in ("env:MY_HF_TOKEN", "file:/home/me/.hf_token"):
        bad = parse(["launch", "--backend", "kubernetes", "--dry-run", "--secret", f"HF_TOKEN={ref}"])
        with pytest.raises(BadInputError) as e:
            bad.run(Starverse(settings), bad)
        assert "kubectl create secret generic hf-token" in (e.value.hint or "") and SECRET not in str(e.value)
        assert "--secret HF_TOKEN=hf-token/value" in (e.value.hint or "")


def test_slurm_gets_the_secret_in_sbatch_environment_and_the_script_only_names_it(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_HF_TOKEN", SECRET)
    token = tmp_path / "wandb"
    token.write_text("wandb-file-secret-0042")
    token.chmod(0o600)
    spec = JobSpec(name="sec", code="pass", secrets={"HF_TOKEN": "env:MY_HF_TOKEN", "WANDB_API_KEY": f"file:{token}"})
    backend = SlurmBackend(settings)
    script = backend.render(spec)
    assert SECRET not in script and "wandb-file-secret" not in script
    assert "#    HF_TOKEN <- env:MY_HF_TOKEN" in script and ': "${HF_TOKEN:?' in script
    seen: dict[str, Any] = {}

    def fake_sbatch(argv: list[str], *, env: dict[str, str] | None = None, **_: Any) -> Any:
        seen["env"], seen["script"] = dict(env or {}), Path(argv[-1]).read_text()
        seen["run"] = Path(argv[-1]).parent
        seen["files"] = _grep(seen["run"]) + _grep(seen["run"], "wandb-file-secret")
        return subprocess.CompletedProcess(argv, 1, "", "sbatch: error: stop here (test)")

    monkeypatch.setattr(slurm_backend.shutil, "which", lambda _: "/usr/bin/sbatch")
    monkeypatch.setattr(slurm_backend, "partitions", lambda: {})
    monkeypatch.setattr(slurm_backend, "run_slurm", fake_sbatch)
    with pytest.raises(Exception, match="stop here"):
        backend.submit(spec)
    assert seen["env"]["HF_TOKEN"] == SECRET and seen["env"]["WANDB_API_KEY"] == "wandb-file-secret-0042"
    assert SECRET not in seen["script"] and seen["files"] == []
    assert "MY_HF_TOKEN" in os.environ  # the submitting environment is left as it was
    wait_for(lambda: not seen["run"].exists(), timeout=5)  # a failed sbatch leaves no run folder


def test_the_magic_takes_secret_the_same_way(ip: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_HF_TOKEN", SECRET)
    preview = ip.run_line_magic("sv", "launch --secret HF_TOKEN=env:MY_HF_TOKEN --env API_TOKEN=abc --dry-run -o json")
    assert SECRET not in json.dumps(preview.to_json())
    assert [w.split()[1] for w in preview.warnings] == ["API_TOKEN"]
