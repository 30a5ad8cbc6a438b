"""REST and secrets (issue 34): a launch body takes ``secrets`` by reference; no answer holds a value."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_starverse._settings import Settings
from jupyter_starverse.client import Starverse
from jupyter_starverse.jobmodel import JobSpec, JobState

SECRET = "hf_Rest0Secret9Value4Qx2Lm7"
SEEN = (
    "import hashlib, os, pathlib\n"
    "v = os.environ.get('HF_TOKEN', '')\n"
    "pathlib.Path(os.environ['STARVERSE_EXPERIMENT_DIR'], 'seen').write_text(hashlib.sha256(v.encode()).hexdigest())\n"
)


async def _post(jp_fetch: Any, body: dict[str, Any]) -> tuple[int, dict[str, Any], str]:
    try:
        reply = await jp_fetch("jupyter-starverse", "jobs", "preview", method="POST", body=json.dumps(body))
    except HTTPClientError as e:
        text = e.response.body.decode() if e.response is not None else ""
        return e.code, json.loads(text), text
    text = reply.body.decode()
    return reply.code, json.loads(text), text


async def test_preview_takes_secret_references_and_warns_about_secret_looking_env(
    jp_fetch: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_HF_TOKEN", SECRET)
    spec = {"name": "sec", "code": "pass", "secrets": {"HF_TOKEN": "env:MY_HF_TOKEN"}, "env": {"WANDB_API_KEY": "x"}}
    code, data, text = await _post(jp_fetch, {"spec": spec, "output": "json"})
    assert code == 200 and SECRET not in text
    [warning] = data["warnings"]
    assert "--env WANDB_API_KEY looks like a secret" in warning and "--secret WANDB_API_KEY=" in warning
    code, data, text = await _post(jp_fetch, {"spec": spec, "backend": "slurm", "output": "sbatch"})
    assert code == 200 and SECRET not in text and "HF_TOKEN <- env:MY_HF_TOKEN" in data["rendered"]
    code, data, text = await _post(jp_fetch, {"spec": spec, "backend": "kubernetes"})
    assert code == 400 and data["field"] == "secrets" and "kubectl create secret" in data["hint"]
    assert SECRET not in text
    bad = {**spec, "secrets": {"HF_TOKEN": SECRET}}  # a value where a reference belongs: 400, not echoed
    code, data, text = await _post(jp_fetch, {"spec": bad})
    assert code == 400 and data["field"] == "secrets" and SECRET not in text
    code, data, text = await _post(jp_fetch, {"spec": {**spec, "secrets": {"HF_TOKEN": "env:NOT_SET_HERE"}}})
    assert code == 400 and "NOT_SET_HERE is not set" in data["message"]


async def test_job_answers_hold_the_reference_only(
    jp_fetch: Any, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_HF_TOKEN", SECRET)
    client = Starverse(settings)
    job = client.launch(JobSpec(name="sec-rest", code=SEEN, secrets={"HF_TOKEN": "env:MY_HF_TOKEN"}))
    done = client.backend("local").wait(job.id, timeout=120)
    assert done.state is JobState.SUCCEEDED, done.reason
    for path in (("jobs", job.id), ("jobs",), ("jobs", job.id, "logs")):
        reply = await jp_fetch("jupyter-starverse", *path)
        text = reply.body.decode()
        assert SECRET not in text, path
    assert "env:MY_HF_TOKEN" in (await jp_fetch("jupyter-starverse", "jobs", job.id)).body.decode()
