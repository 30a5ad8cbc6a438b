"""``/jupyter-starverse/jobs``: list, live state, logs, cancel, TensorBoard; survives a server restart."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_starverse._settings import Settings
from jupyter_starverse.jobmodel import JobState
from tests.widgets._jobs import quick_job, slow_job

REPO = str(Path(__file__).resolve().parents[2])


async def test_list_get_logs_tensorboard_of_a_finished_job(jp_fetch: Any, settings: Settings) -> None:
    handle = quick_job(settings)

    page = json.loads((await jp_fetch("jupyter-starverse", "jobs")).body)
    listed = page["items"]
    assert page["total"] == 1 and page["offset"] == 0 and page["limit"] == 50
    assert [j["id"] for j in listed] == [handle.id]
    row = listed[0]
    assert row["state"] == "succeeded" and row["backend"] == "local"
    assert row["spec"]["steps"] == 5
    assert row["progress"]["step"] == 4 and row["progress"]["fraction"] == 1.0
    assert row["progress"]["points"] == []  # the list stays small
    assert row["progress"]["cost_text"]
    # the progress line is computed once, in Python, and served field by field to the panel
    fields = row["progress"]["line_fields"]
    assert fields[0] == {"key": "state", "text": "succeeded"}
    assert {"key": "step", "text": "step 5/5 (100%)"} in fields
    assert "  ".join(f["text"] for f in fields) == row["progress"]["line"]
    assert [n["state"] for n in row["nodes"]] == ["succeeded"]

    one = json.loads((await jp_fetch("jupyter-starverse", "jobs", handle.id)).body)
    assert one["progress"]["metric"] == "loss"
    assert [p[1] for p in one["progress"]["points"]] == pytest.approx([2.0, 1.0, 2 / 3, 0.5, 0.4])
    assert one["progress"]["ranks"][0]["rank"] == 0 and one["progress"]["ranks"][0]["pid"]

    tail = json.loads(
        (await jp_fetch("jupyter-starverse", "jobs", handle.id, "logs", params={"tail": "2", "rank": "0"})).body
    )
    assert tail["lines"] == [
        {"node": 0, "rank": 0, "text": "step 3 loss 0.500"},
        {"node": 0, "rank": 0, "text": "step 4 loss 0.400"},
    ]

    follow = await jp_fetch("jupyter-starverse", "jobs", handle.id, "logs", params={"follow": "1", "rank": "0"})
    assert follow.headers["Content-Type"] == "application/x-ndjson"
    lines = [json.loads(x) for x in follow.body.decode().splitlines()]
    assert [ln["text"] for ln in lines][-1] == "step 4 loss 0.400"

    tb = json.loads((await jp_fetch("jupyter-starverse", "jobs", handle.id, "tensorboard")).body)
    assert tb["logdir"] == str(Path(handle.experiment_dir) / "tensorboard")
    # one board over the experiment's runs, each named by its run (not ".")
    # the copyable command is the server's own: --logdir of the experiment's run links, each named by its run
    links = Path(handle.experiment_dir).parent.parent / ".tensorboard"
    assert tb["command"] == ["tensorboard", "--logdir", str(links), "--load_fast", "false"]
    assert [p.name for p in links.iterdir()] == [handle.id]
    assert (links / handle.id).resolve() == Path(tb["logdir"]).resolve()
    assert tb["runs"] == [handle.id]
    assert isinstance(tb["has_events"], bool) and isinstance(tb["installed"], bool)

    # cancelling a finished job changes nothing
    cancelled = json.loads(
        (await jp_fetch("jupyter-starverse", "jobs", handle.id, "cancel", method="POST", body="{}")).body
    )
    assert cancelled["state"] == "succeeded"


async def test_log_tail_reads_from_the_end_of_a_large_log(
    jp_fetch: Any, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_starverse.backends.local import LocalBackend
    from jupyter_starverse.experiments import RunPaths

    handle = quick_job(settings, name="biglog")
    log = RunPaths(Path(handle.experiment_dir)).rank_log(0)
    with log.open("ab") as f:  # 64 MiB of earlier output before the last lines
        chunk = (b"x" * 1023 + b"\n") * 1024
        for _ in range(64):
            f.write(chunk)
        f.write(b"the end\n")

    def no_full_read(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the tail must not read the logs through")

    monkeypatch.setattr(LocalBackend, "logs", no_full_read)
    for params in ({"tail": "3", "rank": "0"}, {"tail": "200"}):
        tail = json.loads((await jp_fetch("jupyter-starverse", "jobs", handle.id, "logs", params=params)).body)
        texts = [ln["text"] for ln in tail["lines"] if ln["rank"] == 0]
        assert texts[-1] == "the end" and len(tail["lines"]) <= 200 + 2


async def test_preview_is_the_cli_dry_run_over_rest(jp_fetch: Any, settings: Settings) -> None:
    from jupyter_starverse.cli import parse
    from jupyter_starverse.client import Starverse

    spec = {"name": "prev", "code": "print(1)\n", "nodes": 2, "procs_per_node": 2, "steps": 10, "resume": True}
    reply = await jp_fetch(
        "jupyter-starverse", "jobs", "preview", method="POST", body=json.dumps({"spec": spec, "output": "json"})
    )
    data = json.loads(reply.body)
    assert data["output"] == "json"
    plan = json.loads(data["rendered"])
    assert len(plan["nodes"]) == 2  # the local backend's plan: one torchrun agent per node
    assert data["resume"]["new_world_size"] == 4 and data["resume"]["checkpoint"] is None
    assert data["cost"]  # the price shown before launch (or why it cannot be priced)
    # the same facade call as `starverse launch --dry-run`: same plan, nothing started
    args = parse(
        [
            "train",
            "--name",
            "prev",
            "--nodes",
            "2",
            "--procs",
            "2",
            "--steps",
            "10",
            "--resume",
            "--dry-run",
            "-o",
            "json",
        ],
        cell="print(1)\n",
        notebook=True,
    )
    cli = args.run(Starverse(settings), args)
    assert json.loads(cli.rendered).keys() == plan.keys()
    assert json.loads((await jp_fetch("jupyter-starverse", "jobs")).body)["items"] == []

    # the sbatch script a Slurm cluster would run, rendered without one
    reply = await jp_fetch(
        "jupyter-starverse",
        "jobs",
        "preview",
        method="POST",
        body=json.dumps({"spec": spec, "backend": "slurm", "output": "sbatch"}),
    )
    script = json.loads(reply.body)["rendered"]
    assert script.startswith("#!") and "#SBATCH --nodes=2" in script and "srun" in script

    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("jupyter-starverse", "jobs", "preview", method="POST", body=json.dumps({"spec": "x"}))
    assert err.value.code == 400
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch(
            "jupyter-starverse", "jobs", "preview", method="POST", body=json.dumps({"spec": spec, "output": "toml"})
        )
    assert err.value.code == 400


async def test_bad_requests(jp_fetch: Any) -> None:
    with pytest.raises(HTTPClientError) as missing:
        await jp_fetch("jupyter-starverse", "jobs", "nope-20260101-000000-abcd")
    assert missing.value.code == 404
    body = json.loads(missing.value.response.body)
    assert body["error"] == "NotFoundError" and body["hint"]
    with pytest.raises(HTTPClientError) as logs404:
        await jp_fetch("jupyter-starverse", "jobs", "nope", "logs", params={"follow": "1"})
    assert logs404.value.code == 404
    with pytest.raises(HTTPClientError) as bad_backend:
        await jp_fetch("jupyter-starverse", "jobs", params={"backend": "mainframe"})
    assert bad_backend.value.code == 400


async def test_bad_tail_is_400(jp_fetch: Any, settings: Settings) -> None:
    handle = quick_job(settings)
    for tail in ("abc", "0", "100000"):
        with pytest.raises(HTTPClientError) as bad:
            await jp_fetch("jupyter-starverse", "jobs", handle.id, "logs", params={"tail": tail})
        assert bad.value.code == 400
        assert json.loads(bad.value.response.body)["field"] == "tail"


async def test_delete_cancels_a_running_job(jp_fetch: Any, settings: Settings) -> None:
    handle = slow_job(settings)
    live = json.loads((await jp_fetch("jupyter-starverse", "jobs", handle.id)).body)
    assert live["state"] == "running"
    assert live["progress"]["eta_s"] is not None
    done = json.loads((await jp_fetch("jupyter-starverse", "jobs", handle.id, method="DELETE")).body)
    assert done["state"] == "cancelled"
    assert handle.state is JobState.CANCELLED


async def test_preempt_drill_over_rest_relaunches_a_running_job_and_refuses_finished_or_unknown_ones(
    jp_fetch: Any, settings: Settings
) -> None:
    handle = slow_job(settings, name="drill")
    r = await jp_fetch("jupyter-starverse", "jobs", handle.id, "preempt", method="POST", body="")
    answer = json.loads(r.body)
    assert answer["id"] == handle.id and answer["state"] in ("running", "preempted", "resuming")
    deadline = time.monotonic() + 120
    seen = set()
    while (job := handle.job).restarts < 1 or job.state is not JobState.RUNNING:
        seen.add(job.state)
        assert not job.state.finished, (job.reason, [ln.render() for ln in handle.tail(30)])
        assert time.monotonic() < deadline, f"no relaunch after the drill in 120 s (states seen: {seen})"
        time.sleep(0.3)
    assert seen & {JobState.PREEMPTED, JobState.RESUMING}  # the drill went preempted -> resuming -> running
    await jp_fetch("jupyter-starverse", "jobs", handle.id, "cancel", method="POST", body="")
    with pytest.raises(HTTPClientError) as finished:
        await jp_fetch("jupyter-starverse", "jobs", handle.id, "preempt", method="POST", body="")
    assert finished.value.code == 409 and json.loads(finished.value.response.body)["hint"]
    with pytest.raises(HTTPClientError) as unknown:
        await jp_fetch("jupyter-starverse", "jobs", "nope-20260101-000000-abcd", "preempt", method="POST", body="")
    assert unknown.value.code == 404


# -- a real server process, restarted -------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(port: int, token: str, path: str, method: str = "GET") -> Any:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/{path}",
        method=method,
        headers={"Authorization": f"token {token}"},
        data=b"{}" if method == "POST" else None,
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def _server(tmp_path: Path, port: int, token: str) -> subprocess.Popen[bytes]:
    config = tmp_path / "jupyter_server_config.json"
    config.write_text(json.dumps({"ServerApp": {"jpserver_extensions": {"jupyter_starverse": True}}}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)}
    env["JUPYTER_CONFIG_DIR"] = str(tmp_path)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter_server",
            f"--port={port}",
            "--ip=127.0.0.1",
            f"--IdentityProvider.token={token}",
            "--no-browser",
            f"--ServerApp.root_dir={tmp_path}",
            "--ServerApp.port_retries=0",
            "--allow-root",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "server.log").open("ab"),
    )
    deadline = time.monotonic() + 120
    while True:
        try:
            _get(port, token, "api/status")
            return proc
        except (urllib.error.URLError, ConnectionError):
            assert proc.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the server did not start in 120 s"
            time.sleep(0.3)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.mark.slow
def test_jobs_endpoint_still_shows_the_job_after_a_server_restart(tmp_path: Path, settings: Settings) -> None:
    handle = slow_job(settings, steps=600)
    port, token = _free_port(), "restart-test-token"
    first = _server(tmp_path, port, token)
    try:
        before = _get(port, token, f"jupyter-starverse/jobs/{handle.id}")
        assert before["state"] == "running"
    finally:
        _stop(first)
    assert handle.state is JobState.RUNNING  # the job does not depend on the server

    second = _server(tmp_path, port, token)
    try:
        listed = _get(port, token, "jupyter-starverse/jobs")["items"]
        assert [j["id"] for j in listed] == [handle.id]
        after = listed[0]
        assert after["state"] == "running"
        assert after["progress"]["step"] >= before["progress"]["step"]
        cancelled = _get(port, token, f"jupyter-starverse/jobs/{handle.id}/cancel", method="POST")
        assert cancelled["state"] == "cancelled"
    finally:
        _stop(second)
        handle.cancel()


def _finished_runs(
    settings: Settings, count: int, *, experiment: str = "many", state: str = "succeeded", start: int = 0
) -> list[str]:
    """``count`` finished run folders as the local backend leaves them (spec + status), oldest first."""
    from jupyter_starverse.experiments import ExperimentPaths, RunStatus, write_json, write_status
    from jupyter_starverse.jobmodel import JobSpec

    ids = []
    base = time.time() - 10_000
    for i in range(count):
        job_id = f"{experiment}{i:04d}-20261201-000000-{i:04x}"
        run = ExperimentPaths.of(settings.experiments, experiment).run(job_id)
        run.make()
        write_json(run.spec, JobSpec(name=f"run{i:04d}", code="print(1)\n", experiment=experiment).to_json())
        t = base + start + i
        write_status(run, RunStatus(job_id=job_id, state=state, created=t, started=t, finished=t + 1))
        ids.append(job_id)
    return ids


async def test_job_list_pages_filters_and_answers_304_while_nothing_changed(jp_fetch: Any, settings: Settings) -> None:
    from jupyter_starverse.experiments import ExperimentPaths, read_status, write_status

    ids = _finished_runs(settings, 30)
    failed = _finished_runs(settings, 2, experiment="other", state="failed", start=100)
    first = await jp_fetch("jupyter-starverse", "jobs", params={"limit": "10"})
    page = json.loads(first.body)
    assert page["total"] == 32 and len(page["items"]) == 10
    assert [j["id"] for j in page["items"]] == (failed[::-1] + ids[::-1])[:10]  # newest first
    second = json.loads((await jp_fetch("jupyter-starverse", "jobs", params={"limit": "10", "offset": "10"})).body)
    assert [j["id"] for j in second["items"]] == ids[::-1][8:18]
    only = json.loads((await jp_fetch("jupyter-starverse", "jobs", params={"state": "failed"})).body)
    assert sorted(j["id"] for j in only["items"]) == sorted(failed) and only["total"] == 2
    assert json.loads((await jp_fetch("jupyter-starverse", "jobs", params={"backend": "slurm"})).body)["total"] == 0

    # a poll that sends the validator back gets 304 and no body while nothing changed ...
    etag = first.headers["Etag"]
    with pytest.raises(HTTPClientError) as same:
        await jp_fetch("jupyter-starverse", "jobs", params={"limit": "10"}, headers={"If-None-Match": etag})
    assert same.value.code == 304
    # ... and the page again once a job on it changed
    run = ExperimentPaths.of(settings.experiments, "other").run(failed[-1])
    status = read_status(run)
    assert status is not None
    write_status(run, status.__class__.from_json({**status.to_json(), "reason": "out of memory"}))
    changed = await jp_fetch("jupyter-starverse", "jobs", params={"limit": "10"}, headers={"If-None-Match": etag})
    assert changed.code == 200 and changed.headers["Etag"] != etag
    assert json.loads(changed.body)["items"][0]["reason"] == "out of memory"

    # since= returns what changed after the `now` of an earlier answer
    now = json.loads(changed.body)["now"]
    assert json.loads((await jp_fetch("jupyter-starverse", "jobs", params={"since": str(now)})).body)["items"] == []
    newer = _finished_runs(settings, 1, experiment="later", start=200)
    run = ExperimentPaths.of(settings.experiments, "later").run(newer[0])
    status = read_status(run)
    assert status is not None
    write_status(run, status.__class__.from_json({**status.to_json(), "finished": time.time() + 1}))
    since = json.loads((await jp_fetch("jupyter-starverse", "jobs", params={"since": str(now)})).body)
    assert [j["id"] for j in since["items"]] == newer

    for bad in ({"state": "done"}, {"limit": "0"}, {"since": "yesterday"}, {"backend": "nomad"}):
        with pytest.raises(HTTPClientError) as err:
            await jp_fetch("jupyter-starverse", "jobs", params=bad)
        assert err.value.code == 400, bad


@pytest.mark.slow
async def test_tensorboard_is_one_board_per_experiment_proxied_through_the_jupyter_port(
    jp_fetch: Any, settings: Settings
) -> None:
    if importlib.util.find_spec("tensorboard") is None:
        pytest.skip("tensorboard is not installed: pip install 'jupyter_starverse[train]'")
    handle = quick_job(settings, name="tb")
    # a second run of the same experiment (its events copied): the board compares both
    run = Path(handle.experiment_dir)
    other = run.parent / "tb-earlier-run"
    shutil.copytree(run / "tensorboard", other / "tensorboard")
    before = json.loads((await jp_fetch("jupyter-starverse", "jobs", handle.id, "tensorboard")).body)
    assert before["running"] is False and before["url"] is None
    assert before["has_events"] is True  # the runtime wrote events: tensorboard is installed
    assert before["runs"] == sorted([handle.id, "tb-earlier-run"])

    opened = json.loads(
        (await jp_fetch("jupyter-starverse", "jobs", handle.id, "tensorboard", method="POST", body="{}")).body
    )
    board = opened["board"]
    try:
        # served under the server's base_url, never a loopback URL the browser cannot reach
        assert opened["running"] is True and opened["url"].endswith(f"/jupyter-starverse/tensorboard/{board}/")
        assert not opened["url"].startswith("http")
        page = await jp_fetch("jupyter-starverse", "tensorboard", f"{board}/")
        assert page.code == 200 and b"TensorBoard" in page.body
        assert page.headers["Content-Type"].startswith("text/html")  # a page, not the API's JSON
        assert "default-src 'none'" not in page.headers.get("Content-Security-Policy", "")
        deadline = time.monotonic() + 60  # it loads the runs' events (reload every 5 s)
        tags: dict[str, Any] = {}
        while len(tags) < 2 and time.monotonic() < deadline:
            reply = await jp_fetch("jupyter-starverse", "tensorboard", board, "data", "plugin", "scalars", "tags")
            tags = json.loads(reply.body)
            await asyncio.sleep(0.5)
        # TensorBoard's run names are the runs' names (not "RUN/.", not one "."), so runs compare by name
        assert sorted(tags) == sorted([handle.id, "tb-earlier-run"]) and "loss" in json.dumps(tags), tags
        # the panel's copyable command reads the folder this board reads: the same runs in a terminal
        logdir = Path(opened["command"][opened["command"].index("--logdir") + 1])
        assert sorted(p.name for p in logdir.iterdir()) == sorted([handle.id, "tb-earlier-run"])
        assert (logdir / "tb-earlier-run").resolve() == (other / "tensorboard").resolve()
        # without the Jupyter token: refused, never proxied
        with pytest.raises(HTTPClientError) as refused:
            await jp_fetch("jupyter-starverse", "tensorboard", f"{board}/", headers={"Authorization": ""})
        assert refused.value.code in (302, 403)
        # a board this server does not run is a 404 (no path to another loopback port)
        with pytest.raises(HTTPClientError) as unknown:
            await jp_fetch("jupyter-starverse", "tensorboard", "nosuch-board", "index.html")
        assert unknown.value.code == 404
        # asked again (another panel, a reload): the same process, not a second one
        again = json.loads(
            (await jp_fetch("jupyter-starverse", "jobs", handle.id, "tensorboard", method="POST", body="{}")).body
        )
        assert again["port"] == opened["port"]
        shown = json.loads((await jp_fetch("jupyter-starverse", "jobs", handle.id, "tensorboard")).body)
        assert shown["url"] == opened["url"]
    finally:
        stopped = json.loads(
            (await jp_fetch("jupyter-starverse", "jobs", handle.id, "tensorboard", method="DELETE")).body
        )
    assert stopped["running"] is False
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{opened['port']}/", timeout=5)
