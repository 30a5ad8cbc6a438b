"""REST: ``/jupyter-starverse/cost/*`` through a real jupyter-server with the extension on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from .conftest import small_doc


@pytest.fixture
def jp_server_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv("STARVERSE_HOME", str(tmp_path / "sv-home"))
    monkeypatch.setenv("STARVERSE_USER", "alice")
    monkeypatch.setenv("STARVERSE_MODE", "cpu")
    monkeypatch.delenv("STARVERSE_PRICES", raising=False)
    monkeypatch.delenv("STARVERSE_CURRENCY", raising=False)
    return {"ServerApp": {"jpserver_extensions": {"jupyter_starverse": True}, "allow_unauthenticated_access": False}}


async def _get(jp_fetch: Any, *path: str, **params: str) -> Any:
    response = await jp_fetch("jupyter-starverse", "cost", *path, params=params)
    assert response.code == 200
    return json.loads(response.body)


async def _error(jp_fetch: Any, *path: str, **params: str) -> tuple[int, dict[str, Any]]:
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("jupyter-starverse", "cost", *path, params=params)
    assert err.value.response is not None
    return err.value.code, json.loads(err.value.response.body)


async def test_estimate_seed_example(jp_fetch: Any) -> None:
    data = await _get(jp_fetch, "estimate", gpu="rtx4090", cards="32", hours="4")
    assert data["amount"] == "230.40" and data["currency"] == "CNY"
    assert data["billing"] == "on_demand" and data["billed_seconds"] == 14400
    spot = await _get(jp_fetch, "estimate", gpu="rtx4090", cards="32", duration="4h", billing="spot")
    assert (spot["low"], spot["high"]) == ("51.20", "153.60")
    assert "reclaimed" in spot["note"]


async def test_estimate_defaults_to_the_workspace_mode(jp_fetch: Any) -> None:
    data = await _get(jp_fetch, "estimate", cards="2", hours="10")  # cpu mode: 2 nodes x 0.1
    assert (data["accelerator"], data["unit"], data["amount"]) == ("cpu", "node", "2.00")


async def test_compare(jp_fetch: Any) -> None:
    data = await _get(jp_fetch, "compare", gpu="rtx4090", cards="32", duration="3d", billing="on_demand,daily,weekly")
    assert [r["billing"] for r in data["rows"]] == ["on_demand", "daily", "weekly"]
    assert data["cheapest"] == {"accelerator": "rtx4090", "billing": "daily", "amount": "2903.04"}
    types = await _get(jp_fetch, "compare", gpu="rtx4090", cards="8", hours="1", billing="on_demand", gpus="all")
    assert {r["accelerator"] for r in types["rows"]} == {"rtx4090", "a100-80g", "a100-40g", "h100-80g", "l40s"}
    some = await _get(jp_fetch, "compare", gpu="rtx4090", cards="8", hours="1", billing="on_demand", gpus="a100-80g")
    assert [r["accelerator"] for r in some["rows"]] == ["rtx4090", "a100-80g"]


async def test_prices_and_total(jp_fetch: Any, tmp_path: Path) -> None:
    prices = await _get(jp_fetch, "prices")
    assert prices["currency"] == "CNY" and prices["gpus"]["rtx4090"]["on_demand"] == "1.8"
    total = await _get(jp_fetch, "total")
    assert total == {"user": "alice", "amounts": [], "runs": 0, "running": 0, "records": [], "unreadable": []}


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"gpu": "v100", "hours": "4"}, "accelerator"),
        ({"gpu": "rtx4090", "hours": "-4"}, "duration"),
        ({"gpu": "rtx4090", "hours": "1e9"}, "duration"),
        ({"gpu": "rtx4090", "hours": "four"}, "duration"),
        ({"gpu": "rtx4090", "hours": "sNaN"}, "duration"),
        ({"gpu": "rtx4090", "hours": "Infinity"}, "duration"),
        ({"gpu": "rtx4090"}, "duration"),
        ({"gpu": "rtx4090", "hours": "4", "duration": "4h"}, "duration"),
        ({"gpu": "rtx4090", "hours": "4", "billing": "hourly"}, "billing"),
        ({"gpu": "rtx4090", "hours": "4", "cards": "many"}, "cards"),
        ({"gpu": "rtx4090", "hours": "4", "cards": "0"}, "cards"),
    ],
)
async def test_bad_input_is_a_400_with_a_hint(jp_fetch: Any, params: dict[str, str], field: str) -> None:
    code, body = await _error(jp_fetch, "estimate", **params)
    assert code == 400
    assert body["error"] == "BadInputError" and body["field"] == field
    assert body["message"]


async def test_unknown_job_is_a_404(jp_fetch: Any) -> None:
    code, _ = await _error(jp_fetch, "jobs", "no-such-job")
    assert code == 404


class TestOperatorPriceFile:
    @pytest.fixture
    def jp_server_config(  # type: ignore[override]
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> dict[str, Any]:
        monkeypatch.setenv("STARVERSE_HOME", str(tmp_path / "sv-home"))
        path = tmp_path / "ops-prices.json"
        path.write_text(json.dumps(small_doc()))
        return {
            "ServerApp": {"jpserver_extensions": {"jupyter_starverse": True}, "allow_unauthenticated_access": False},
            "StarverseApp": {"prices_file": str(path), "currency": "eur"},
        }

    async def test_traitlets_replace_the_table(self, jp_fetch: Any) -> None:
        prices = await _get(jp_fetch, "prices")
        assert prices["currency"] == "EUR" and list(prices["gpus"]) == ["t4"]
        data = await _get(jp_fetch, "estimate", gpu="t4", cards="2", hours="10")
        assert (data["amount"], data["currency"]) == ("7.00", "EUR")
        code, body = await _error(jp_fetch, "estimate", gpu="t4", hours="1", billing="spot")
        assert code == 400 and "no spot price" in body["message"]


class TestMalformedPriceFile:
    @pytest.fixture
    def jp_server_config(  # type: ignore[override]
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> dict[str, Any]:
        monkeypatch.setenv("STARVERSE_HOME", str(tmp_path / "sv-home"))
        path = tmp_path / "broken.json"
        path.write_text('{"currency": "CNY", "gpus": {"rtx4090": {"on_demand": "1.8"}}}')  # no cpu_node
        return {
            "ServerApp": {"jpserver_extensions": {"jupyter_starverse": True}, "allow_unauthenticated_access": False},
            "StarverseApp": {"prices_file": str(path)},
        }

    async def test_clear_error_not_a_500(self, jp_fetch: Any) -> None:
        code, body = await _error(jp_fetch, "prices")
        assert code == 400
        assert "cpu_node" in body["message"] and body["hint"]


def _finished_run(experiments: Path, job_id: str, *, budget: str | None = None) -> None:
    """A finished local run folder: 2 nodes x 4 rtx4090 cards, node 0 relaunched once."""
    from jupyter_starverse.experiments import ExperimentPaths, NodeRecord, RunStatus, write_json, write_status
    from jupyter_starverse.jobmodel import JobSpec

    run = ExperimentPaths.of(experiments, "exp").run(job_id)
    run.make()
    spec = JobSpec(name="exp", script="t.py", nodes=2, procs_per_node=4, accelerator="rtx4090", budget=budget)
    write_json(run.spec, spec.to_json())
    t0 = 1_796_000_000.0
    nodes = (
        NodeRecord(0, "cancelled", started=t0, finished=t0 + 1900, launches=((t0, t0 + 100), (t0 + 100, t0 + 1900))),
        NodeRecord(1, "cancelled", started=t0, finished=t0 + 1800, launches=((t0, t0 + 1800),)),
    )
    write_status(
        run,
        RunStatus(
            job_id=job_id,
            state="cancelled",
            created=t0,
            started=t0,
            finished=t0 + 1900,
            reason="cancelled",
            nodes=nodes,
        ),
    )


async def test_job_meter(jp_fetch: Any, tmp_path: Path) -> None:
    _finished_run(tmp_path / "sv-home" / "experiments", "exp-1")
    data = await _get(jp_fetch, "jobs", "exp-1")
    # (1900 + 1800) s x 4 cards x 1.8 / 3600 = 7.40
    assert (data["amount"], data["currency"], data["running"]) == ("7.40", "CNY", False)
    assert [n["seconds"] for n in data["nodes"]] == [1900, 1800]


async def _post(jp_fetch: Any, body: object) -> Any:
    response = await jp_fetch("jupyter-starverse", "cost", "preview", method="POST", body=json.dumps(body))
    assert response.code == 200
    return json.loads(response.body)


async def test_preview_of_a_spec(jp_fetch: Any) -> None:
    spec = {"name": "big", "script": "t.py", "nodes": 4, "procs_per_node": 8, "accelerator": "rtx4090", "budget": "100"}
    data = await _post(jp_fetch, {"spec": spec, "hours": 4})
    assert data["per_hour_high"] == "57.6" and data["budget_lasts"] == 6250
    assert data["estimate"]["amount"] == "230.40"
    assert "will be stopped after about 1h44m10s" in data["warning"]
    plain = await _post(jp_fetch, {"spec": {**spec, "budget": None}})
    assert plain["estimate"] is None and plain["warning"] is None


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"spec": {"name": "x", "script": "t.py", "accelerator": "v100"}}, "accelerator"),
        ({"spec": {"name": "x", "script": "t.py", "billing": "hourly"}}, "billing"),
        ({"spec": {"name": "x", "script": "t.py", "colour": "red"}}, "colour"),
        ({"spec": {"name": "x", "script": "t.py"}, "hours": -1}, "duration"),
        ({"spec": {"name": "x", "script": "t.py"}, "hours": "sNaN"}, "duration"),
        ({"spec": {"name": "x", "script": "t.py"}, "hours": True}, "duration"),
        ({"spec": {"name": "x", "script": "t.py"}, "hours": 1, "duration": "1h"}, "duration"),
        ({"spec": "big"}, "spec"),
        ({"job": {}}, "job"),
        ([], None),
    ],
)
async def test_preview_bad_input_is_a_400(jp_fetch: Any, body: object, field: str | None) -> None:
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("jupyter-starverse", "cost", "preview", method="POST", body=json.dumps(body))
    assert err.value.code == 400
    assert err.value.response is not None
    assert json.loads(err.value.response.body)["field"] == field


async def test_mixed_plan(jp_fetch: Any) -> None:
    data = await _get(jp_fetch, "mixed", pools="rtx4090:256,a100-80g:128", duration="12d")
    assert data["recommended"] == "split: a stage per pool" and data["options"][2]["high"] == "372326.40"
    code, body = await _error(jp_fetch, "mixed", pools="rtx4090:256", duration="12d")
    assert code == 400 and body.get("hint")
