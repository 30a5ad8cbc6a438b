"""Malformed input never makes a route of ours answer 5xx.

Every route of the extension (``make_handlers``) and every verb its handler implements gets
each malformed class: deep nesting, wrong JSON types for every body key, non-JSON bodies,
huge numbers, non-ASCII digits, NaN/Infinity, overlong strings, ``..`` in path segments,
unknown query parameters and empty bodies. Every structural body class goes to every route; of
the values sent under each key, each route gets every third one, the rotation shifted by one per
route, so every (key, value) pair reaches a third of the routes and every route every key
(``STARVERSE_FUZZ_ALL=1``: every value to every route, about three times the requests). The
tests below the fuzz pin the precise 400 of each cause the security review found.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import time
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError, HTTPResponse
from tornado.netutil import Resolver
from tornado.web import RequestHandler

from jupyter_starverse._settings import Settings
from jupyter_starverse.experiments import RunPaths, read_metrics
from jupyter_starverse.jobmodel import JobSpec
from jupyter_starverse.server import StarverseApp
from jupyter_starverse.server._routes import NAMESPACE, make_handlers

VERBS = ("GET", "POST", "PUT", "PATCH", "DELETE")
BODY_VERBS = ("POST", "PUT", "PATCH")

DEEP = 100_000
HUGE_DIGITS = "9" * 5000

# Values of every wrong JSON type (and the odd right one) for each body key.
BAD_JSON_VALUES: list[Any] = [
    5,
    -1,
    0,
    1.5,
    True,
    None,
    "x",
    "",
    "\u0663",
    "\uff15",
    "1e9999999",
    "NaN",
    "../../etc/passwd",
    "x" * 100_000,
    [],
    ["x", 1, None],
    {},
    {"a": {"b": []}},
    10**400 // 10**100,  # a 300-digit int
]

# Keys any of our bodies reads.
BODY_KEYS = [
    "spec", "hours", "duration", "backend", "output",
    "kind", "gpu_type", "gpus", "force", "state_id",
    "name", "source", "version", "description", "license", "ref",
]  # fmt: skip

SPEC_KEYS = [f.name for f in fields(JobSpec)]
BASE_SPEC = {"name": "fuzz", "script": "train.py"}

RAW_BODIES: list[bytes] = [
    b"",
    b"not json",
    b"{",
    b"\xff\xfe\x00garbage",
    b"null",
    b"[]",
    b'"a string"',
    b"5",
    b"NaN",
    b'{"hours": NaN}',
    b'{"hours": Infinity, "spec": {"name": "x", "script": "t.py"}}',
    b'{"hours": -Infinity}',
    b'{"hours": 1e9999999}',
    b'{"gpus": ' + HUGE_DIGITS.encode() + b"}",
    b"[" * DEEP + b"]" * DEEP,
    b'{"a":' * DEEP + b"1" + b"}" * DEEP,
    b'{"spec": ' + b"[" * DEEP + b"]" * DEEP + b"}",
    b'{"spec": {"name": "x", "script": "t.py", "env": ' + b'{"A":' * 500 + b'"v"' + b"}" * 500 + b"}}",
    b'{"spec": {"name": "x", "script": "t.py", "args": ' + b"[" * 900 + b"]" * 900 + b"}}",
    json.dumps({"name": "x" * 1_000_000}).encode(),
]

QUERY_KEYS = [
    "gpu", "cards", "hours", "duration", "billing", "gpus", "user", "backend",
    "tail", "rank", "follow", "ref", "kind", "gpu_type", "force", "zz_unknown",
]  # fmt: skip
BAD_QUERY_VALUES = [
    "\u0663",
    "\uff15",
    "\u00b2",
    HUGE_DIGITS,
    "1e9999999",
    "-1e9999999",
    "NaN",
    "Infinity",
    "-1",
    "0",
    "1.5",
    "",
    "x" * 10_000,
    "..",
    "../../etc/passwd",
    "%00",
    "\x00",
    "a,,b,..",
]
# A plausible base so validation of one parameter is reached past the required others.
BASE_QUERY = {"hours": "1", "kind": "cpu", "ref": "mnist"}

# Path group values: plausible ones and malicious ones.
PLAUSIBLE = {"job_id": "fuzz-job-1", "kernel_id": "abc-123", "state_id": "0123abcd-0000"}
MALICIOUS = ["..", "a..b", "../../etc", "%2e%2e", "x" * 300, "\u0663", HUGE_DIGITS]


def _implemented(handler: type[RequestHandler]) -> list[str]:
    return [v for v in VERBS if getattr(handler, v.lower()) is not getattr(RequestHandler, v.lower())]


def _paths(pattern: str) -> list[str]:
    """Concrete paths (without the leading namespace) for a route pattern."""
    rel = pattern.split(f"/{NAMESPACE}/", 1)[1].rstrip("$")
    names = re.findall(r"\(\?P<(\w+)>", rel)
    if not names:
        return [rel]

    def fill(value_for: dict[str, str]) -> str:
        return re.sub(r"\(\?P<(\w+)>(?:[^()]|\([^()]*\))*\)", lambda m: value_for[m.group(1)], rel)

    out = [fill({n: PLAUSIBLE.get(n, "x") for n in names})]
    out.extend(fill(dict.fromkeys(names, bad)) for bad in MALICIOUS)
    return out


STRIDE = 1 if os.environ.get("STARVERSE_FUZZ_ALL") == "1" else 3


def _share(values: list[Any], turn: int) -> list[Any]:
    """The values this route gets: every ``STRIDE``-th, starting at ``turn`` (all of them with a stride of 1)."""
    return [v for i, v in enumerate(values) if (i + turn) % STRIDE == 0]


def _bodies(turn: int = 0) -> Iterator[bytes]:
    yield from RAW_BODIES
    for key in BODY_KEYS:
        for value in _share(BAD_JSON_VALUES, turn):
            yield json.dumps({key: value}).encode()
    for key in SPEC_KEYS:
        for value in _share(BAD_JSON_VALUES, turn):
            yield json.dumps({"spec": {**BASE_SPEC, key: value}, "hours": 1}).encode()
    for spec in ({}, {"name": 5}, {"nodes": "x"}, {"script": "t.py"}, []):
        yield json.dumps({"spec": spec}).encode()


def _queries(turn: int = 0) -> Iterator[dict[str, str]]:
    yield {}
    for key in QUERY_KEYS:
        for value in _share(BAD_QUERY_VALUES, turn):
            base = {k: v for k, v in BASE_QUERY.items() if not (key == "duration" and k == "hours")}
            yield {**base, key: value}
            yield {key: value}


async def _send(jp_fetch: Any, path: str, verb: str, *, body: bytes | None = None,
                params: dict[str, str] | None = None) -> int:  # fmt: skip
    kwargs: dict[str, Any] = {"method": verb, "params": params or {}, "request_timeout": 60}
    if verb in BODY_VERBS:
        kwargs["body"] = body if body is not None else b""
    try:
        response: HTTPResponse = await jp_fetch(NAMESPACE, *path.split("/"), **kwargs)
    except HTTPClientError as e:
        return e.code
    return response.code


class _Loopback(Resolver):
    """The test client's every request goes to 127.0.0.1: no getaddrinfo on a worker thread per request."""

    async def resolve(self, host: str, port: int, family: socket.AddressFamily = socket.AF_UNSPEC) -> list[Any]:
        return [(socket.AF_INET, ("127.0.0.1", port))]


@pytest.fixture
def quiet_server(jp_serverapp: Any, http_server_client: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Tens of thousands of requests without the per-request costs that assert nothing.

    The server answers exactly as in every other test; only its access log line (a warning per
    4xx, captured by pytest), its debug log and the client's name lookup per request are off.
    Each of these cost more than the request itself.
    """
    monkeypatch.setitem(jp_serverapp.web_app.settings, "log_function", lambda handler: None)
    monkeypatch.setattr(http_server_client.tcp_client, "resolver", _Loopback())
    loggers = [jp_serverapp.log, logging.getLogger(StarverseApp.__name__)]  # the server's, our handlers'
    levels = [log.level for log in loggers]
    for log in loggers:
        log.setLevel(logging.WARNING)
    yield
    for log, level in zip(loggers, levels, strict=True):
        log.setLevel(level)


@pytest.mark.usefixtures("quiet_server")
async def test_no_malformed_request_gets_a_5xx(jp_fetch: Any, settings: Settings) -> None:
    started = time.monotonic()
    count, failures, turn = 0, [], 0
    for pattern, handler in make_handlers():
        for verb in _implemented(handler):
            turn += 1
            queries, bodies = list(_queries(turn)), list(_bodies(turn))
            for i, path in enumerate(_paths(pattern)):
                # The plausible path gets every case; malicious path values a few of each kind.
                cases: list[tuple[bytes | None, dict[str, str]]] = [
                    (None, q) for q in (queries if i == 0 else queries[:3])
                ]
                if verb in BODY_VERBS:
                    cases += [(b, {}) for b in (bodies if i == 0 else bodies[:3] + bodies[14:16])]
                for body, params in cases:
                    if "follow" in params and verb == "GET" and path.endswith("/logs"):
                        continue  # streaming: covered by test_jobs
                    code = await _send(jp_fetch, path, verb, body=body, params=params)
                    count += 1
                    if code >= 500 or code == 599:
                        failures.append((verb, path, (body or b"")[:80], {k: v[:40] for k, v in params.items()}, code))
    elapsed = time.monotonic() - started
    print(f"fuzz: {count} requests, {len(failures)} answered 5xx, {elapsed:.1f}s")
    assert count > 10_000 // STRIDE
    assert not failures, f"{len(failures)} of {count} got 5xx, e.g. {failures[:10]}"


# ---- one test per cause of the security review --------------------------------------------


async def _error(jp_fetch: Any, *parts: str, **kwargs: Any) -> tuple[int, dict[str, Any]]:
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch(NAMESPACE, *parts, **kwargs)
    assert info.value.response is not None
    return info.value.code, json.loads(info.value.response.body)


@pytest.mark.parametrize(
    "body",
    [b"[" * DEEP + b"]" * DEEP, b'{"spec": ' + b"[" * DEEP + b"]" * DEEP + b"}", b'{"a":' * 200 + b"1" + b"}" * 200],
)
async def test_deeply_nested_body_is_a_400(jp_fetch: Any, body: bytes) -> None:
    code, reply = await _error(jp_fetch, "cost", "preview", method="POST", body=body)
    assert code == 400 and reply["error"] == "BadInputError"
    assert "nested" in reply["message"] and reply["hint"]


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"nodes": "x"}, "name"),
        ({}, "name"),
        ({"name": 5}, "name"),
        ({"name": "ok", "script": "t.py", "nodes": "x"}, "nodes"),
        ({"name": "ok", "script": 5}, "script"),
        ({"name": "ok", "script": "t.py", "args": "not-a-list"}, "args"),
        ({"name": "ok", "script": "t.py", "env": []}, "env"),
        ({"name": "ok", "script": "t.py", "env": {"A": {"b": 1}}}, "env"),
        ({"name": "ok", "script": "t.py", "mounts": [1]}, "mounts"),
        ({"name": "ok", "script": "t.py", "accelerator": []}, "accelerator"),
        ({"name": "ok", "script": "t.py", "template": ["ddp"]}, "template"),
        ({"name": "ok", "script": "t.py", "budget": [1]}, "budget"),
        ({"name": "ok", "script": "t.py", "resume": "yes"}, "resume"),
        ({"name": "ok", "script": "t.py", "experiment": 5}, "experiment"),
    ],
)
async def test_preview_spec_of_wrong_types_is_a_400(jp_fetch: Any, spec: dict[str, Any], field: str) -> None:
    code, reply = await _error(jp_fetch, "cost", "preview", method="POST", body=json.dumps({"spec": spec}))
    assert code == 400 and reply["error"] == "BadInputError"
    assert reply["field"] == field and reply["message"].startswith("JobSpec.") and reply["hint"]


def test_jobspec_from_json_rejects_wrong_types_with_bad_input() -> None:
    from jupyter_starverse.errors import BadInputError

    for data in ({"name": "ok", "script": "t.py", "command": 5}, {"name": "ok", "code": {}}, {"name": None}):
        with pytest.raises(BadInputError):
            JobSpec.from_json(data)
    with pytest.raises(BadInputError, match="JSON object"):
        JobSpec.from_json([])  # type: ignore[arg-type]


@pytest.mark.parametrize("gpus", ["\u0663", "\uff15", "\u00b2", HUGE_DIGITS, "-1", "0"])
async def test_plan_gpus_must_be_a_sane_ascii_number(jp_fetch: Any, gpus: str) -> None:
    code, reply = await _error(jp_fetch, "mode", "plan", params={"kind": "gpu", "gpus": gpus})
    assert code == 400 and reply["field"] == "gpus"
    assert "whole number" in reply["message"] and reply["hint"]


@pytest.mark.parametrize("hours", ["1e9999999", "-1e9999999", "1e999", HUGE_DIGITS, "NaN", "\u0663"])
async def test_absurd_hours_are_a_400_on_every_cost_route(jp_fetch: Any, hours: str) -> None:
    for route in ("estimate", "compare"):
        code, reply = await _error(jp_fetch, "cost", route, params={"gpu": "cpu", "hours": hours})
        assert code == 400 and reply["field"] == "duration" and reply["hint"], reply
    body = json.dumps({"spec": BASE_SPEC, "hours": hours})
    code, reply = await _error(jp_fetch, "cost", "preview", method="POST", body=body)
    assert code == 400 and reply["field"] == "duration" and reply["hint"], reply


def _write_metrics(run: Path, lines: list[str]) -> None:
    paths = RunPaths(run)
    paths.metrics.parent.mkdir(parents=True, exist_ok=True)
    paths.metrics.write_text("".join(line + "\n" for line in lines))


def test_metric_records_with_absurd_steps_are_skipped(tmp_path: Path) -> None:
    _write_metrics(
        tmp_path,
        [
            '{"step": 0, "loss": 2.0}',
            '{"step": ' + HUGE_DIGITS + ', "loss": 1.0}',
            '{"step": ' + "9" * 30 + ', "loss": 1.0}',
            '{"step": -5, "loss": 1.0}',
            '{"step": 1, "loss": 1.5, "rank": "x"}',
            '{"step": 1, "loss": 1.5, "time": 1e999}',
            '{"step": 2, "loss": 1e999}',
            '{"step": 3, "loss": 0.5}',
        ],
    )
    points = read_metrics(tmp_path)
    assert [p.step for p in points] == [0, 1, 2, 3]
    assert points[1].time is None  # an infinite time is dropped, the record kept
    assert points[2].values == {}  # so is an infinite loss
    log_paths = RunPaths(tmp_path / "other")
    log_paths.rank_log(0).parent.mkdir(parents=True, exist_ok=True)
    log_paths.rank_log(0).write_text(f"step {HUGE_DIGITS} loss 1.0\nstep 7 loss 0.5\n")
    assert [(p.step, p.values["loss"]) for p in read_metrics(log_paths)] == [(7, 0.5)]


async def test_one_bad_metrics_line_does_not_break_the_job_list(jp_fetch: Any, settings: Settings) -> None:
    from tests.widgets._jobs import quick_job

    handle = quick_job(settings)
    with RunPaths(Path(handle.job.experiment_dir)).metrics.open("a") as f:
        f.write('{"step": ' + "9" * 4000 + ', "loss": 1.0}\n')
        f.write('{"step": ' + HUGE_DIGITS + ', "loss": 1.0}\n')
    listed = json.loads((await jp_fetch(NAMESPACE, "jobs")).body)["items"]
    assert [j["id"] for j in listed] == [handle.id]
    assert listed[0]["progress"]["step"] == 4
