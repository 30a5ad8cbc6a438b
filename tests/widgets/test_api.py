"""The Python front door: ``jupyter_starverse.launch / jobs / attach``."""

from __future__ import annotations

import pytest

import jupyter_starverse as starverse
from jupyter_starverse._api import JobList, client
from jupyter_starverse._settings import Settings
from jupyter_starverse.errors import BadInputError, NotFoundError
from jupyter_starverse.jobmodel import JobState
from jupyter_starverse.widgets import JobHandle

from ._jobs import QUICK


def test_launch_is_the_front_door_function_and_no_package_shadows_it() -> None:
    import importlib.util

    import jupyter_starverse.backends  # noqa: F401 - the backends package is not called `launch`

    assert importlib.util.find_spec("jupyter_starverse.launch") is None
    assert callable(starverse.launch) and starverse.launch.__module__ == "jupyter_starverse._api"


def test_launch_jobs_attach_round_trip(settings: Settings) -> None:
    assert client() is client(Settings.from_env())  # one facade per settings
    handle = starverse.launch(code=QUICK, name="front", steps=5)
    assert isinstance(handle, JobHandle)
    assert handle.wait(timeout=300).state is JobState.SUCCEEDED

    listed = starverse.jobs()
    assert isinstance(listed, JobList)
    assert [j.id for j in listed] == [handle.id]
    assert handle.id in str(listed) and "succeeded" in str(listed)
    assert f"<td>{handle.id}</td>" in listed._repr_html_()
    assert listed.to_json()[0]["id"] == handle.id

    again = starverse.attach(handle.id)
    assert again == handle and again.state is JobState.SUCCEEDED
    assert [p[0] for p in again.progress().points] == [0, 1, 2, 3, 4]

    # a spec plus overrides: same script, other name and topology (dry run of the mapping)
    spec = handle.job.spec.replace(name="front2", procs_per_node=2)
    assert spec.code == QUICK and spec.world_size == 2


def test_attach_unknown_and_bad_fields() -> None:
    with pytest.raises(NotFoundError):
        starverse.attach("nothing-20260101-000000-0000")
    with pytest.raises(BadInputError, match="nodes"):
        starverse.launch(code="print(1)", nodes=0)
    with pytest.raises(BadInputError, match="no_such_field") as unknown:
        starverse.launch(code="print(1)", no_such_field=1)
    assert unknown.value.hint is not None and "procs_per_node" in unknown.value.hint
    assert starverse.jobs() == []
