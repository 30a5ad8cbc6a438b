"""Valid-looking bodies, mutated one value at a time, never make a route answer 5xx or take 10 s.

``test_fuzz.py`` throws the same malformed classes at every route; this file starts from a body
each route accepts (a spec, a pipeline, a data step, a feedback record ...) and changes one leaf
or key at a time by kind: lone surrogates, over-long strings and names, huge / negative / zero /
1e308 numbers, wrong types, nulls, nested junk, paths with ``..`` and ``/``, unknown keys, and
non-JSON or empty bodies. The generator is seeded per route, so a failure names a request that
fails again. The tests after it pin each cause that issues 34 and 38 found.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError, HTTPResponse
from tornado.web import RequestHandler

from jupyter_starverse.server._routes import NAMESPACE, make_handlers

VERBS = ("GET", "POST", "PUT", "PATCH", "DELETE")
BODY_VERBS = ("POST", "PUT", "PATCH")
PER_ROUTE = 150  # requests per route and verb (those with a body or a query; a bare GET gets one)
TIMEOUT_S = 10.0  # a request that takes longer is a failure (DoS), whatever it answers

SPEC = {
    "name": "fuzz",
    "script": "train.py",
    "nodes": 1,
    "procs_per_node": 1,
    "steps": 5,
    "budget": "10",
    "env": {"A": "1"},
    "args": ["--lr", "0.1"],
    "template": "ddp",
    "accelerator": "cpu",
}
# Two steps that cannot run (no script, no dataset), so no single mutation makes `pipelines/run` start a job.
PIPELINE = {
    "version": 1,
    "name": "fuzz",
    "backend": "local",
    "nodes": [
        {"id": "data", "kind": "dataset", "params": {"ref": "missing-set"}, "position": {"x": 0, "y": 0}},
        {
            "id": "train",
            "kind": "train",
            "position": {"x": 100, "y": 0},
            "params": {
                "script": "missing.py",
                "nodes": 1,
                "gpus_per_node": 2,
                "tensor_parallel": 2,
                "pipeline_parallel": 1,
                "data_parallel": 1,
                "hours": 2,
                "budget": "100",
                "steps": 10,
                "billing": "on_demand",
                "gpu": "cpu",
                "env": {"A": "1"},
                "args": ["--x"],
            },
        },
        {"id": "prep", "kind": "prep", "params": {"step": "clean", "options": {"examples": 2}}},
        {"id": "tune", "kind": "train", "params": {"script": "missing2.py", "hours": 1}},
    ],
    "edges": [
        {"source": "data", "target": "prep"},
        {"source": "prep", "target": "train"},
        {"source": "train", "target": "tune"},
    ],
}
REPORT_ID = "20260101-000000-scan-input-abcd"

# Query arguments and body of a request each route would accept (route path relative to the namespace).
TEMPLATES: dict[tuple[str, str], tuple[dict[str, str], dict[str, Any] | None]] = {
    ("GET", "cost/estimate"): ({"gpu": "a100-80g", "cards": "1", "hours": "1", "billing": "on_demand"}, None),
    ("GET", "cost/compare"): ({"gpu": "cpu", "cards": "2", "hours": "4", "billing": "all", "gpus": "all"}, None),
    ("GET", "cost/mixed"): ({"pools": "rtx4090:256,a100-80g:128", "duration": "12d", "billing": "on_demand"}, None),
    ("GET", "cost/total"): ({"user": "tester"}, None),
    ("GET", "cost/jobs/{job_id}"): ({"backend": "local"}, None),
    ("POST", "cost/preview"): ({}, {"spec": SPEC, "hours": 2}),
    ("GET", "jobs"): (
        {"state": "running", "backend": "local", "experiment": "e", "since": "0", "offset": "0", "limit": "10"},
        None,
    ),
    ("POST", "jobs/preview"): ({}, {"spec": SPEC, "backend": "local", "output": "yaml"}),
    ("GET", "jobs/{job_id}"): ({"backend": "local"}, None),
    ("DELETE", "jobs/{job_id}"): ({"backend": "local"}, None),
    ("POST", "jobs/{job_id}/cancel"): ({"backend": "local"}, {}),
    ("POST", "jobs/{job_id}/preempt"): ({"backend": "local"}, {}),
    ("GET", "jobs/{job_id}/logs"): ({"tail": "10", "rank": "0"}, None),
    ("POST", "store"): (
        {},
        {"name": "fuzz-added", "source": "corpus", "version": "v1", "description": "d", "license": "mit"},
    ),
    ("GET", "store/entry"): ({"ref": "missing-set"}, None),
    ("GET", "store/mount"): ({"ref": "missing-set@v1"}, None),
    ("POST", "store/pull"): ({}, {"ref": "missing-set", "allow": ["*.json"], "ignore": ["*.bin"], "connections": 4}),
    ("GET", "data/report"): ({"id": REPORT_ID}, None),
    ("GET", "data/report/html"): ({"id": REPORT_ID}, None),
    ("GET", "data/preview"): ({"id": REPORT_ID, "threshold": "0.8"}, None),
    ("POST", "data/estimate"): ({}, {"step": "scan", "source": "missing-set", "text_field": "text"}),
    ("POST", "data/steps"): (
        {},
        {
            "step": "clean",
            "source": "missing-set",
            "to": "out@v1",
            "text_field": "text",
            "options": {"examples": 2, "actions": {"email": "mask"}},
        },
    ),
    ("PUT", "mode"): ({}, {"kind": "cpu", "gpu_type": "a100-80g", "gpus": 1, "force": False}),
    ("GET", "mode/plan"): ({"kind": "gpu", "gpus": "1", "gpu_type": "a100-80g", "force": "false"}, None),
    ("POST", "mode/kernels/{kernel_id}"): ({}, {"state_id": "0123abcd-0000"}),
    ("POST", "pipelines/validate"): ({}, {"pipeline": PIPELINE, "path": "fuzz.svpipeline"}),
    ("POST", "pipelines/cost"): ({}, {"pipeline": PIPELINE, "path": "fuzz.svpipeline"}),
    ("POST", "pipelines/export"): (
        {},
        {"pipeline": PIPELINE, "path": "fuzz.svpipeline", "format": "sbatch", "write": False},
    ),
    ("POST", "pipelines/run"): ({}, {"pipeline": PIPELINE, "path": "fuzz.svpipeline", "backend": "local"}),
    ("POST", "recipes/publish"): ({}, {"job_id": "fuzz-job-1", "repo": "org/name@v1"}),
    ("POST", "recipes/{name}/preview"): (
        {},
        {"model": "hf:org/missing", "data": ["missing-set"], "params": {}, "job": {"nodes": 1}},
    ),
    ("POST", "recipes/{name}/launch"): (
        {},
        {"model": "hf:org/missing", "data": ["missing-set"], "params": {}, "job": {"nodes": 1}},
    ),
    ("GET", "feedback/table"): ({"ref": "fuzzlog"}, None),
    ("POST", "feedback/records"): (
        {},
        {
            "log": "fuzzlog",
            "model": "m",
            "prompt": "p",
            "answer": "a",
            "vote": "up",
            "better": "b",
            "comment": "c",
            "answer_id": "a1",
            "session": "s1",
        },
    ),
    ("POST", "feedback/snapshot"): ({}, {"log": "fuzzlog"}),
    ("POST", "chat/sessions"): ({}, {"model": "hf:org/missing"}),
    ("POST", "chat/sessions/{session_id}/turns"): (
        {},
        {"messages": [{"role": "user", "content": "hi"}], "max_new_tokens": 8},
    ),
    ("GET", "chat/sessions/{session_id}/turns/{turn_id}"): ({"after": "0"}, None),
    ("POST", "export"): ({}, {"model": "hf:org/missing", "format": "onnx", "force": False}),
    # a model that does not exist: a fuzzed POST serve never starts a real server process (a 4xx first)
    ("POST", "serve"): ({}, {"model": "hf:org/missing", "engine": "auto", "port": 0}),
    ("POST", "serve/render"): ({}, {"model": "hf:org/missing", "backend": "kubernetes"}),
    ("POST", "evals"): ({}, {"model": "hf:org/missing", "data": "missing-set", "limit": 4}),
}
PATH_VALUES = {
    "job_id": "fuzz-job-1",
    "run_id": "fuzz-run",
    "name": "sft",
    "session_id": "abc123",
    "endpoint_id": "fuzz-endpoint-1",
    "turn_id": "t1",
    "kernel_id": "k1",
    "state_id": "0123abcd-0000",
    "task_id": "abc",
    "report_id": "fuzz-report",
    "board": "fuzz-board",  # the TensorBoard proxy: a board this server never started (404)
    "path": "data/runs",
}

# What a leaf of a body becomes, by kind.
STRINGS: list[Any] = [
    "\ud800",
    "a\udfffb",
    "x" * 300,
    "d/" + "n" * 300,
    "x" * 5000,
    "",
    " ",
    "..",
    "../../etc",
    "./..//..",
    "/",
    "/etc/passwd",
    "~",
    "a\x00b",
    "%2e%2e",
    "\u0663",
    "NaN",
    "1e9999999",
    "-1e9999999",
]
NUMBERS: list[Any] = [0, -1, 1e308, -1e308, 10**30, 2**63, 0.5, 1e-308, -0.0, 4097, 10**18]
OTHERS: list[Any] = [None, True, False, [], {}, [1, "x", None], {"a": {"b": [None]}}, "1", [["x"] * 3] * 3]
HUGE = "x" * 1_000_000
RAW: list[bytes] = [
    b"",
    b"{",
    b"not json",
    b"\xff\xfe\x00",
    b"null",
    b"[]",
    b'"s"',
    b"5",
    b"NaN",
    b'{"a": Infinity}',
    b'{"a": ' + b"9" * 5000 + b"}",
    b"[" * 5000 + b"]" * 5000,
]
# Query values (the client percent-encodes them; a lone surrogate cannot be sent as a query).
QUERY_VALUES = [
    "",
    "0",
    "-1",
    "1e308",
    "NaN",
    "inf",
    "\u0663",
    "x" * 5000,
    "n" * 300,
    "..",
    "/",
    "./..//..",
    "\x00",
    "a,,b",
    "9" * 400,
    "true",
]


def _implemented(handler: type[RequestHandler]) -> list[str]:
    return [v for v in VERBS if getattr(handler, v.lower()) is not getattr(RequestHandler, v.lower())]


def _route_table() -> list[tuple[str, str]]:
    """``(verb, path with {group} placeholders)`` of every route and verb the extension serves."""
    out = []
    for pattern, handler in make_handlers():
        rel = pattern.split(f"/{NAMESPACE}/", 1)[1].rstrip("$")
        rel = re.sub(r"\(\?P<(\w+)>(?:[^()]|\([^()]*\))*\)", lambda m: "{" + m.group(1) + "}", rel)
        out.extend((verb, rel) for verb in _implemented(handler))
    return out


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The path of every value in ``value`` (containers as well as scalars), root excluded."""
    if isinstance(value, dict):
        for key, child in value.items():
            yield (*path, key)
            yield from _leaves(child, (*path, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield (*path, i)
            yield from _leaves(child, (*path, i))


def _set(doc: Any, path: tuple[Any, ...], value: Any, *, delete: bool = False) -> Any:
    doc = json.loads(json.dumps(doc))
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return doc


def _dump(body: Any) -> bytes:
    return json.dumps(body).encode("utf-8", "surrogatepass")  # ensure_ascii: "\ud800" goes as its escape


def _cases(verb: str, route: str) -> list[tuple[dict[str, str], bytes | None]]:
    """``PER_ROUTE`` mutated requests of one route and verb, the same ones on every run."""
    rng = random.Random(zlib.crc32(f"{verb} {route}".encode()))
    query, body = TEMPLATES.get((verb, route), ({}, {} if verb in BODY_VERBS else None))
    cases: list[tuple[dict[str, str], bytes | None]] = [(query, _dump(body) if body is not None else None)]
    for key in query:
        for value in QUERY_VALUES:
            cases.append(({**query, key: value}, _dump(body) if body is not None else None))
        cases.append(({k: v for k, v in query.items() if k != key}, _dump(body) if body is not None else None))
    if body is not None:
        kinds = STRINGS + NUMBERS + OTHERS
        for path in _leaves(body):
            cases.extend((query, _dump(_set(body, path, value))) for value in kinds)
            cases.append((query, _dump(_set(body, path, None, delete=True))))
        cases.extend((query, raw) for raw in RAW)
        cases.append((query, _dump({**body, "zz_unknown": 1})))
        cases.append((query, _dump(_set(body, next(iter(_leaves(body)), ("a",)), HUGE)) if body else _dump(HUGE)))
    # then two values changed at once (a bad number next to a bad name), until the route has its share
    spots = [("q", k) for k in query] + [("b", p) for p in (_leaves(body) if body is not None else ())]
    values = STRINGS + NUMBERS + OTHERS
    for _ in range(4 * PER_ROUTE if len(spots) >= 2 else 0):
        q, b = dict(query), body
        for where, spot in rng.sample(spots, 2):
            if where == "q":
                q[spot] = rng.choice(QUERY_VALUES)
            else:
                try:
                    b = _set(b, spot, rng.choice(values))
                except (KeyError, IndexError, TypeError):  # the first change replaced its parent
                    pass
        cases.append((q, _dump(b) if b is not None else None))
    first, rest = cases[:1], cases[1:]
    rng.shuffle(rest)
    # every raw body and the huge one are kept; the rest sampled
    keep = [c for c in rest if c[1] in RAW or (c[1] is not None and len(c[1]) > 500_000)]
    rest = [c for c in rest if c not in keep]
    return first + keep + rest[: max(0, PER_ROUTE - 1 - len(keep))]


async def _send(jp_fetch: Any, verb: str, path: str, params: dict[str, str], body: bytes | None) -> tuple[int, float]:
    kwargs: dict[str, Any] = {"method": verb, "params": params, "request_timeout": TIMEOUT_S}
    if verb in BODY_VERBS:
        kwargs["body"] = body if body is not None else b""
    started = time.monotonic()
    try:
        response: HTTPResponse = await jp_fetch(NAMESPACE, *path.split("/"), **kwargs)
        code = response.code
    except HTTPClientError as e:
        code = e.code
        if 400 <= code < 500 and e.response is not None and e.response.body:
            reply = json.loads(e.response.body)
            assert reply.get("message") and reply.get("hint"), (verb, path, reply)  # what was wrong, what to do
    return code, time.monotonic() - started


@pytest.fixture
def fuzz_root(jp_root_dir: Path) -> Path:
    """A small folder of data under the server's root (what a `source` of "corpus" may name)."""
    corpus = jp_root_dir / "corpus"
    corpus.mkdir()
    (corpus / "a.jsonl").write_text('{"text": "hello alice@example.com"}\n{"text": "second"}\n')
    return jp_root_dir


async def test_mutated_valid_bodies_never_get_a_5xx_or_hang(jp_fetch: Any, fuzz_root: Path) -> None:
    started = time.monotonic()
    count, failures, slowest = 0, [], (0.0, "")
    routes = _route_table()
    assert len(routes) >= 50  # the table is read, not a copy of it
    for verb, route in routes:
        path = route.format(**PATH_VALUES)
        for params, body in _cases(verb, route):
            code, took = await _send(jp_fetch, verb, path, params, body)
            count += 1
            shown = (body or b"")[:120]
            if took > slowest[0]:
                slowest = (took, f"{verb} {path} {shown!r}")
            if code >= 500 or code == 599:
                failures.append((code, verb, path, {k: v[:40] for k, v in params.items()}, shown))
    elapsed = time.monotonic() - started
    print(
        f"fuzz routes: {count} requests over {len(routes)} routes, {len(failures)} 5xx or timeouts, "
        f"{elapsed:.1f}s; slowest {slowest[0]:.2f}s: {slowest[1]}"
    )
    assert not failures, f"{len(failures)} of {count} failed, e.g. {failures[:8]}"


# ---- the causes issues 34 and 38 found, one test each -------------------------------------------


async def _error(jp_fetch: Any, *parts: str, **kwargs: Any) -> tuple[int, dict[str, Any]]:
    kwargs.setdefault("request_timeout", TIMEOUT_S)
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch(NAMESPACE, *parts, **kwargs)
    assert info.value.response is not None, info.value
    return info.value.code, json.loads(info.value.response.body)


async def _post(jp_fetch: Any, route: str, body: dict[str, Any] | str) -> dict[str, Any]:
    text = body if isinstance(body, str) else json.dumps(body)
    r = await jp_fetch(NAMESPACE, *route.split("/"), method="POST", body=text, request_timeout=TIMEOUT_S)
    return json.loads(r.body)  # type: ignore[no-any-return]


def _train(**params: Any) -> dict[str, Any]:
    node = {"id": "t", "kind": "train", "params": {"script": "t.py", "nodes": 1, "gpus_per_node": 2, **params}}
    return {"pipeline": {"version": 1, "name": "p", "nodes": [node], "edges": []}}


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"tensor_parallel": 0}, "tensor_parallel"),  # ZeroDivisionError
        ({"pipeline_parallel": 0}, "pipeline_parallel"),
        ({"data_parallel": 0}, "data_parallel"),
        ({"hours": 1e308}, "hours"),  # OverflowError
        ({"hours": 0}, "hours"),
        ({"hours": -1}, "hours"),
        ({"budget": "lots"}, "budget"),  # decimal.InvalidOperation
        ({"budget": "NaN"}, "budget"),
        ({"budget": "-Infinity"}, "budget"),
        ({"budget": -5}, "budget"),
        ({"budget": "1e9999999"}, "budget"),  # decimal.Overflow in the budget check
    ],
)
async def test_pipeline_numbers_out_of_range_are_issues_on_the_node(
    jp_fetch: Any, params: dict[str, Any], field: str
) -> None:
    """Issue 34: `tensor_parallel: 0`, `hours: 1e308` and a non-numeric budget were 500s on every pipeline route."""
    for route in ("pipelines/validate", "pipelines/cost"):
        found = await _post(jp_fetch, route, _train(**params))
        errors = [i for i in found["issues"] if i["level"] == "error" and i["field"] == field]
        assert errors and errors[0]["node"] == "t" and not found["ok"], found["issues"]
        assert errors[0]["message"] and (errors[0]["hint"] or field == "budget"), errors
    for route in ("pipelines/run", "pipelines/export"):
        code, reply = await _error(jp_fetch, *route.split("/"), method="POST", body=json.dumps(_train(**params)))
        assert code == 400 and reply["hint"], reply


async def test_a_budget_past_the_decimal_range_is_not_a_500(jp_fetch: Any, fuzz_root: Path) -> None:
    """`budget: "1e9999999"` of a spec whose script exists overflowed the budget check (decimal.Overflow).

    The spec now bounds a budget like the pipelines do (at most 1e15): a 400 naming the bound, never a 500.
    """
    (fuzz_root / "t.py").write_text("print('hi')\n")
    spec = {"name": "x", "script": str(fuzz_root / "t.py"), "budget": "1e9999999"}
    code, reply = await _error(jp_fetch, "jobs", "preview", method="POST", body=json.dumps({"spec": spec}))
    assert code == 400 and "budget" in reply["message"] and "at most" in reply["hint"], reply
    spec["budget"] = "1e15"
    preview = await _post(jp_fetch, "jobs/preview", {"spec": spec})
    assert preview["rendered"] and preview["cost"], preview


def test_a_chain_of_prep_steps_that_skip_ahead_is_checked_in_linear_time(client: Any, tmp_path: Path) -> None:
    """Issue 34: the inputs of a prep chain were walked once per path (doubling per step): 30 steps took 20 s."""
    from jupyter_starverse.pipelines import Pipeline

    nodes: list[dict[str, Any]] = [{"id": "d", "kind": "dataset", "params": {"ref": "tiny"}}]
    edges = []
    for i in range(150):
        nodes.append({"id": f"p{i}", "kind": "prep", "params": {"step": "clean"}})
        edges.append({"source": "d" if i == 0 else f"p{i - 1}", "target": f"p{i}"})
        if i > 1:
            edges.append({"source": f"p{i - 2}", "target": f"p{i}"})
    pipeline = Pipeline.from_json({"version": 1, "name": "chain", "nodes": nodes, "edges": edges})
    found = client.pipelines.check(pipeline, base_dir=tmp_path)  # 2^75 walks before; returns now
    assert {i.node for i in found.issues} >= {"p0", "p149"}


async def test_validates_of_a_large_pipeline_do_not_block_other_routes(
    jp_fetch: Any, jp_serverapp: Any, tmp_path: Path
) -> None:
    """Issue 34: eight parallel validates of a 200-node pipeline held every worker thread: `GET store` took 84 s.

    Each validate here waits until `GET store` has answered, so with one shared pool (more validates than
    its threads) `GET store` never answers. Validation runs in the pool of long calls.
    """
    client = jp_serverapp.web_app.settings["starverse_client"]
    check = client.pipelines.check
    answered = threading.Event()
    threads: list[str] = []

    def slow_check(pipeline: Any, *, base_dir: Path) -> Any:
        threads.append(threading.current_thread().name)
        answered.wait(timeout=30)
        return check(pipeline, base_dir=base_dir)

    client.pipelines.check = slow_check
    nodes = [{"id": f"t{i}", "kind": "train", "params": {"script": "t.py"}} for i in range(200)]
    body = json.dumps({"pipeline": {"version": 1, "name": "big", "nodes": nodes, "edges": []}})
    count = min(32, (os.cpu_count() or 1) + 4) + 2  # more than the default pool has threads
    validates = [
        asyncio.ensure_future(
            jp_fetch(NAMESPACE, "pipelines", "validate", method="POST", body=body, request_timeout=120)
        )
        for _ in range(count)
    ]
    await asyncio.sleep(0.5)  # the validates are in
    started = time.monotonic()
    store = await jp_fetch(NAMESPACE, "store", request_timeout=TIMEOUT_S)
    took = time.monotonic() - started
    answered.set()
    done = await asyncio.gather(*validates)
    print(f"GET store answered in {took * 1e3:.0f} ms while {count} validates of 200 nodes waited")
    assert store.code == 200 and json.loads(store.body) == []
    assert all(r.code == 200 and len(json.loads(r.body)["issues"]) >= 200 for r in done)
    assert threads and all(name.startswith("starverse-heavy") for name in threads), set(threads)


async def test_a_huge_text_field_is_refused_before_it_reaches_a_report(jp_fetch: Any, fuzz_root: Path) -> None:
    """Issue 34: a 10 MB `text_field` made a 534 MB JSON + 524 MB HTML report (it is repeated per bad line)."""
    for route in ("data/estimate", "data/steps"):
        body = {"step": "scan", "source": "./corpus", "text_field": "x" * 10_000_000}
        code, reply = await _error(jp_fetch, *route.split("/"), method="POST", body=json.dumps(body))
        assert code == 400 and reply["field"] == "text_field" and "256" in reply["hint"], reply


def test_report_snippets_are_cut() -> None:
    """A report keeps at most MAX_SNIPPET characters of any one document, whatever the line holds."""
    from jupyter_starverse.data import DocRef, Example
    from jupyter_starverse.data._types import MAX_SNIPPET

    ref = DocRef(1, "a.jsonl:1", "x" * 10_000_000)
    example = Example("a.jsonl:1", "y" * 1_000_000, "z" * 1_000_000, "n" * 1_000_000)
    assert len(ref.snippet) == MAX_SNIPPET and ref.snippet.endswith("…")
    assert max(len(example.before), len(example.after), len(example.note)) == MAX_SNIPPET


@pytest.mark.parametrize("source", ["/", "./..//..", "../../..", "/etc", "file:///", "~", "zip://a::file:///x"])
async def test_a_source_outside_the_root_and_the_store_is_refused(jp_fetch: Any, fuzz_root: Path, source: str) -> None:
    """Issues 34 and 38: `source: "/"` read the whole file system for 6 minutes; `./..//..` ran for 120 s."""
    for route in ("data/estimate", "data/steps"):
        body = {"step": "scan", "source": source}
        code, reply = await _error(jp_fetch, *route.split("/"), method="POST", body=json.dumps(body))
        assert code == 400 and reply["field"] == "source", reply
        assert reply["hint"] and "name a store dataset" in reply["hint"], reply


async def test_a_source_under_the_root_is_read(jp_fetch: Any, fuzz_root: Path) -> None:
    for source in ("corpus", "./corpus", str(fuzz_root / "corpus")):
        est = await _post(jp_fetch, "data/estimate", {"step": "scan", "source": source})
        assert est["docs"] == 2, est


@pytest.mark.parametrize(
    ("route", "body", "field"),
    [
        ("jobs/preview", '{"spec": {"name": "\\ud800", "script": "t.py"}}', "spec"),
        ("jobs/preview", '{"spec": {"name": "x", "code": "print(1) \\udfff"}}', "spec"),
        ("cost/preview", '{"spec": {"name": "a\\ud800b", "script": "t.py"}}', "spec"),
        ("feedback/records", '{"log": "l", "model": "m", "prompt": "\\ud800", "answer": "a", "vote": "up"}', "prompt"),
        ("data/steps", '{"step": "scan", "source": "\\ud800"}', "source"),
        ("store", '{"name": "n", "source": "\\udc80"}', "source"),
        ("pipelines/validate", '{"pipeline": {"version": 1, "name": "\\ud800", "nodes": [], "edges": []}}', "pipeline"),
    ],
)
async def test_a_lone_surrogate_in_a_string_is_a_400(jp_fetch: Any, route: str, body: str, field: str) -> None:
    """Issue 38: a lone surrogate (`\\ud800`) in a string field answered 500."""
    code, reply = await _error(jp_fetch, *route.split("/"), method="POST", body=body)
    assert code == 400 and reply["field"] == field and "surrogate" in reply["message"] and reply["hint"], reply


def test_the_core_refuses_lone_surrogates_too(client: Any) -> None:
    """What the CLI passes (argv bytes that are not UTF-8 arrive as surrogates) is refused in the core as well."""
    from jupyter_starverse.errors import BadInputError

    with pytest.raises(BadInputError, match="surrogate"):
        client.feedback.record("log", model="m", prompt="\udcff", answer="a", vote="up")
    with pytest.raises(BadInputError, match="surrogate"):
        client.data.estimate("scan", "./\udcff")


async def test_over_long_names_are_a_400_before_the_file_system_sees_them(jp_fetch: Any, settings: Any) -> None:
    """Issue 38: ENAMETOOLONG from data/report, data/report/html, recipes/publish and chat/sessions was a 500."""
    from jupyter_starverse.catalog import Catalog

    (Catalog(settings).root / "prepared" / "_reports").mkdir(parents=True)  # ENOENT would hide ENAMETOOLONG
    long = "x" * 300
    for route in ("data/report", "data/report/html"):
        code, reply = await _error(jp_fetch, *route.split("/"), params={"id": long})
        assert code == 400 and reply["field"] == "id" and "255" in reply["message"] and reply["hint"], reply
    for body, field in (
        ({"job_id": long, "repo": "org/name@v1"}, "job_id"),
        ({"job_id": "j", "repo": f"org/{long}@v1"}, "repo"),
    ):
        code, reply = await _error(jp_fetch, "recipes", "publish", method="POST", body=json.dumps(body))
        assert code == 400 and reply["field"] == field and reply["hint"], reply
    for model in (long, f"./{long}/model", f"exp:{long}"):
        code, reply = await _error(jp_fetch, "chat", "sessions", method="POST", body=json.dumps({"model": model}))
        assert code == 400 and reply["field"] == "model" and reply["hint"], reply
    pipeline = {"version": 1, "name": "p", "nodes": [], "edges": []}
    for path in (f"{long}.svpipeline", "x" * 250 + ".svpipeline", f"a/{long}/b.svpipeline"):
        body = {"pipeline": pipeline, "path": path, "format": "sbatch", "write": True}
        code, reply = await _error(jp_fetch, "pipelines", "export", method="POST", body=json.dumps(body))
        assert code == 400 and reply["field"] == "path" and reply["hint"], reply
    spec = {"name": "x", "script": f"{long}.py"}
    code, reply = await _error(jp_fetch, "jobs", "preview", method="POST", body=json.dumps({"spec": spec}))
    assert code == 400 and reply["field"] == "script" and reply["hint"], reply
