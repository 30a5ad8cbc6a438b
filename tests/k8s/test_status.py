"""Pod and job states from wire objects: phases, stuck reasons, indexes of every kind."""

from __future__ import annotations

from typing import Any

from jupyter_starverse.backends.kubernetes._status import job_state, latest_per_node, node_status
from jupyter_starverse.jobmodel import JobState


def _pod(phase: str, *, index: str = "0", created: str = "2026-01-01T00:00:00Z", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"p{index}-{created[-3:-1]}",
            "creationTimestamp": created,
            "annotations": {"batch.kubernetes.io/job-completion-index": index},
        },
        "status": {"phase": phase, **status},
    }


def test_waiting_problems_are_the_reason() -> None:
    waiting = {"waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "x"'}}
    node = node_status(_pod("Pending", containerStatuses=[{"state": waiting}]))
    assert node.state is JobState.PENDING and node.reason == 'ImagePullBackOff: Back-off pulling image "x"'
    creating = node_status(_pod("Pending", containerStatuses=[{"state": {"waiting": {"reason": "ContainerCreating"}}}]))
    assert creating.reason is None  # normal start-up is not a problem


def test_unschedulable_and_exit_codes() -> None:
    cond = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes"}]
    assert node_status(_pod("Pending", conditions=cond)).reason == "Unschedulable: 0/3 nodes"
    term = {"terminated": {"exitCode": 137, "reason": "OOMKilled", "finishedAt": "2026-01-01T00:01:00Z"}}
    node = node_status(_pod("Failed", index="3", containerStatuses=[{"state": term}]))
    assert (node.index, node.state, node.exit_code, node.reason) == (
        3,
        JobState.FAILED,
        137,
        "OOMKilled: exit code 137",
    )
    assert node.finished == 1767225660.0


def test_pytorchjob_replica_indexes() -> None:
    def pod(kind: str, i: int) -> dict[str, Any]:
        labels = {"training.kubeflow.org/replica-type": kind, "training.kubeflow.org/replica-index": str(i)}
        return {"metadata": {"name": f"{kind}-{i}", "labels": labels}, "status": {"phase": "Running"}}

    assert [n.index for n in latest_per_node([pod("master", 0), pod("worker", 1), pod("worker", 0)])] == [0, 1, 2]


def test_retried_index_shows_the_newest_pod() -> None:
    old = _pod("Failed", created="2026-01-01T00:00:00Z")
    new = _pod("Running", created="2026-01-01T00:05:00Z")
    (node,) = latest_per_node([new, old])
    assert node.state is JobState.RUNNING


def test_job_states_from_conditions() -> None:
    running = latest_per_node([_pod("Running")])
    assert job_state({}, running).state is JobState.RUNNING
    assert job_state({}, ()).state is JobState.PENDING
    suspended = job_state({"spec": {"suspend": True}}, ())
    assert suspended.state is JobState.PENDING and "Kueue" in (suspended.reason or "")
    for kind_done in ("Complete", "Completed", "Succeeded"):  # Job, JobSet, PyTorchJob
        done = {"status": {"conditions": [{"type": kind_done, "status": "True"}]}}
        assert job_state(done, running).state is JobState.SUCCEEDED
    failed = {"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}}
    assert job_state(failed, ()).reason == "BackoffLimitExceeded"
    not_yet = {"status": {"conditions": [{"type": "Failed", "status": "False"}]}}
    assert job_state(not_yet, running).state is JobState.RUNNING
