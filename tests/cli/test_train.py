"""``%%sv train``: the cell body is the script; options map onto JobSpec; bad cells launch nothing."""

from __future__ import annotations

from decimal import Decimal

import pytest

from jupyter_starverse.cli import parse
from jupyter_starverse.cli._common import UsageError
from jupyter_starverse.cli._train import spec_from_args
from jupyter_starverse.client import Starverse
from jupyter_starverse.errors import BadInputError
from jupyter_starverse.jobmodel import JobState
from jupyter_starverse.watch import JobWatch
from tests.widgets._jobs import QUICK


def test_options_map_onto_the_spec() -> None:
    args = parse(
        ["train", "--name", "lm", "--nodes", "2", "--procs", "3", "--template", "fsdp", "--mount", "data",
         "--mount", "gpt2", "--steps", "50", "--experiment", "exp1", "--resume", "--budget", "2.5",
         "--billing", "spot", "--max-restarts", "2", "--checkpoint-every", "10", "--env", "A=1", "--env", "B=x=y",
         "--", "--lr", "0.1"],
        cell="print(1)\n",
        notebook=True,
    )
    spec = spec_from_args(args, args.cell)
    assert (spec.name, spec.nodes, spec.procs_per_node, spec.template) == ("lm", 2, 3, "fsdp")
    assert spec.mounts == ("data", "gpt2")
    assert (spec.steps, spec.experiment, spec.resume) == (50, "exp1", True)
    assert spec.budget == Decimal("2.5") and spec.billing == "spot"
    assert (spec.max_restarts, spec.checkpoint_every) == (2, 10)
    assert dict(spec.env) == {"A": "1", "B": "x=y"}
    assert spec.args == ("--lr", "0.1")
    assert spec.code == "print(1)\n" and spec.accelerator == "cpu"


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["train", "--env", "NOEQUALS"], "KEY=VALUE"), (["train", "--template", "zz"], "invalid choice")],
)
def test_bad_options_are_usage_errors(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse(argv, cell="print(1)", notebook=True)


@pytest.mark.parametrize(
    ("cell", "message"),
    [
        (None, "cell body"),
        ("   \n", "cell is empty"),
        ("for x in range(3)\n    print(x)\n", "syntax error on line 1"),
    ],
)
def test_bad_cells_launch_nothing(client: Starverse, cell: str | None, message: str) -> None:
    args = parse(["train", "--steps", "5"], cell=cell, notebook=cell is not None)
    with pytest.raises(BadInputError, match=message) as info:
        args.run(client, args)
    assert info.value.field == "script" and info.value.hint
    assert client.jobs() == []


def test_nonsense_topology_is_refused(client: Starverse) -> None:
    args = parse(["train", "--nodes", "0"], cell="print(1)", notebook=True)
    with pytest.raises(BadInputError, match="nodes"):
        args.run(client, args)
    assert client.jobs() == []


def test_dry_run_renders_and_starts_nothing(client: Starverse) -> None:
    args = parse(["train", "--nodes", "2", "--steps", "5", "--dry-run"], cell="print(1)", notebook=True)
    preview = args.run(client, args)
    assert preview.resume is None
    text = str(preview)
    assert "- index: 0" in text and "- index: 1" in text  # one agent per node
    assert "STARVERSE_STEPS: '5'" in text
    assert client.jobs() == []


def test_dry_run_of_a_resume_prints_the_plan(client: Starverse) -> None:
    args = parse(["train", "--experiment", "e1", "--resume", "--procs", "2", "--dry-run"], cell="print(1)",
                 notebook=True)
    preview = args.run(client, args)
    assert preview.resume is not None and preview.resume.new_world_size == 2
    assert preview.resume.checkpoint is None  # nothing to resume from yet: it starts at step 0
    assert str(preview).startswith("# ")
    assert client.jobs() == []


def test_train_returns_a_handle_of_a_real_job(client: Starverse) -> None:
    args = parse(["train", "--name", "cell", "--steps", "5"], cell=QUICK, notebook=True)
    handle = args.run(client, args)
    assert isinstance(handle, JobWatch)  # the magics show it as the monitor
    job = handle.wait(timeout=300)
    assert job.state is JobState.SUCCEEDED, job.reason
    assert job.spec.code == QUICK
    assert handle.progress().step == 4
    assert handle.to_json()["progress"]["state"] == "succeeded"
    assert str(handle).startswith(handle.id)
