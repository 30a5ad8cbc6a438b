"""Checks pinned to nodes (cards, GPU pool, dataset) and the whole pipeline's cost."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from jupyter_starverse.client import Starverse
from jupyter_starverse.pipelines import Issue, Pipeline

from .conftest import doc


def _issues(client: Starverse, data: dict, folder: Path) -> list[Issue]:  # type: ignore[type-arg]
    return list(client.pipelines.check(Pipeline.from_json(data), base_dir=folder).issues)


def test_a_good_pipeline_has_no_issue_and_fills_the_data_path(client: Starverse, folder: Path, dataset: str) -> None:
    found = client.pipelines.check(Pipeline.from_json(doc(data=dataset, train={"nodes": 2})), base_dir=folder)
    assert found.ok, found.issues
    train = found.info["train"]
    assert train["cards"] == 2 and train["data_parallel"] == 2
    assert train["mounts"] == [dataset]
    assert Path(train["paths"][dataset], "train.jsonl").is_file()  # the mount's folder on the store
    assert train["script"] == str(folder / "steps" / "train.py")


def test_parallel_sizes_must_multiply_to_the_cards(client: Starverse, folder: Path) -> None:
    train = {"nodes": 2, "gpus_per_node": 2, "data_parallel": 2, "tensor_parallel": 2, "pipeline_parallel": 2}
    issues = _issues(client, doc(train=train), folder)
    bad = [i for i in issues if i.node == "train" and i.field == "data_parallel"]
    assert bad and "= 8, but the step has 4 card(s)" in bad[0].message
    train["data_parallel"] = 1
    assert not [i for i in _issues(client, doc(train=train), folder) if i.field == "data_parallel"]


def test_the_tp_and_pp_templates_derive_their_degree_from_the_cards(client: Starverse, folder: Path) -> None:
    # the form's placeholders show these: a tp step on 4 cards splits 4 ways, not 1 (dp 4 x tp 1)
    for template, key in (("tp", "tensor_parallel"), ("pp", "pipeline_parallel")):
        train = {"nodes": 2, "gpus_per_node": 2, "template": template}
        info = client.pipelines.check(Pipeline.from_json(doc(train=train)), base_dir=folder).info["train"]
        assert info[key] == 4 and info["data_parallel"] == 1, (template, info)
        train["data_parallel"] = 2  # a set degree is kept; the template takes the rest
        info = client.pipelines.check(Pipeline.from_json(doc(train=train)), base_dir=folder).info["train"]
        assert info[key] == 2 and info["data_parallel"] == 2, (template, info)
    ddp = client.pipelines.check(Pipeline.from_json(doc(train={"nodes": 2})), base_dir=folder).info["train"]
    assert ddp["tensor_parallel"] == 1 and ddp["pipeline_parallel"] == 1


def test_a_gpu_type_without_a_pool_is_shown_on_the_node(client: Starverse, folder: Path) -> None:
    issues = _issues(client, doc(backend="kubernetes", train={"gpu": "h900-1t"}), folder)
    gpu = [i for i in issues if i.node == "train" and i.field == "gpu" and i.level == "error"]
    assert gpu and "no node pool for 'h900-1t'" in gpu[0].message
    assert not [i for i in issues if i.node == "prep" and i.level == "error"]  # the other node is fine


def test_a_missing_or_unpulled_dataset_is_an_error_on_its_node(client: Starverse, folder: Path, tmp_path: Path) -> None:
    issues = _issues(client, doc(data="nosuch@v1"), folder)
    assert any(i.node == "data" and i.field == "ref" and i.level == "error" for i in issues)
    assert any(i.node == "train" and "is not ready" in i.message for i in issues)
    src = tmp_path / "lazy"
    src.mkdir()
    (src / "a.txt").write_text("x")
    client.catalog.add_dataset("lazy", str(src), version="v1")  # registered, never pulled
    issues = _issues(client, doc(data="lazy@v1"), folder)
    unpulled = [i for i in issues if i.node == "data"]
    assert unpulled and "not pulled" in unpulled[0].message and "store pull lazy@v1" in (unpulled[0].hint or "")


def test_a_missing_script_is_an_error_on_its_node(client: Starverse, folder: Path) -> None:
    issues = _issues(client, doc(first="steps/nope.py"), folder)
    assert any(i.node == "prep" and i.field == "script" and "does not exist" in i.message for i in issues)


def test_the_total_cost_is_the_sum_of_the_steps(client: Starverse, folder: Path) -> None:
    one = client.pipelines.check(Pipeline.from_json(doc(train={"nodes": 1, "hours": 2})), base_dir=folder)
    two = client.pipelines.check(Pipeline.from_json(doc(train={"nodes": 2, "hours": 2})), base_dir=folder)
    rate = client.prices.price("cpu").on_demand
    assert one.total_low == rate * 1 + rate * 2  # prep: 1 node for the default hour; train: 1 node x 2 h
    assert two.total_low - one.total_low == rate * 2  # a second node for 2 hours
    assert two.total_high == two.total_low > Decimal(0)
    assert "CNY" in two.total_text


def test_a_budget_below_the_estimate_warns_on_the_node(client: Starverse, folder: Path) -> None:
    issues = _issues(client, doc(train={"hours": 10, "budget": "0.01"}), folder)
    assert any(i.node == "train" and i.level == "warning" and i.field == "budget" for i in issues)


def test_a_prep_step_s_shards_are_checked_on_the_node(client: Starverse, folder: Path, dataset: str) -> None:
    def prep(shards: object, step: str = "dedup") -> Pipeline:
        return Pipeline.from_json({
            "version": 1, "name": "p",
            "nodes": [{"id": "raw", "kind": "dataset", "params": {"ref": dataset}},
                      {"id": "d", "kind": "prep", "params": {"step": step, "shards": shards}}],
            "edges": [{"source": "raw", "target": "d"}],
        })  # fmt: skip

    ok = client.pipelines.check(prep("2x2"), base_dir=folder)
    assert not [i for i in ok.issues if i.field == "shards"] and ok.info["d"]["shards"] == 4
    assert ok.costs[0].reason == "runs as 4 CPU rank(s): no GPU rented"
    for shards, step, why in (("0", "dedup", "between 1 and"), ("2", "score", "score runs on one rank")):
        (issue,) = [
            i for i in client.pipelines.check(prep(shards, step), base_dir=folder).issues if i.field == "shards"
        ]
        assert why in issue.message and issue.node == "d" and issue.hint
