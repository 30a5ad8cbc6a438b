"""Issue 27: a bare NAME means the newest original version; a job records the exact version it mounted."""

from __future__ import annotations

from pathlib import Path

from jupyter_starverse.cli import main
from jupyter_starverse.client import Starverse
from jupyter_starverse.jobmodel import JobSpec


def _folder(tmp_path: Path, name: str, docs: int) -> str:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "a.txt").write_text("doc\n" * docs)
    return str(folder)


def test_derived_versions_never_replace_the_original_and_jobs_record_the_version(
    client: Starverse, tmp_path: Path, capsys: object
) -> None:
    cat = client.catalog
    cat.add_dataset("corpus", _folder(tmp_path, "raw", 111))
    cat.add_dataset("corpus", _folder(tmp_path, "clean", 6), version="1-clean", derived_from="corpus@1")
    cat.add_dataset("corpus", _folder(tmp_path, "dedup", 5), version="1-clean-dedup", derived_from="corpus@1-clean")
    cat.add_dataset("corpus", _folder(tmp_path, "old", 4), version="1-score")  # a record from before derived_from
    assert cat.entry("corpus").ref == "corpus@1"  # the newest *original*, whatever steps ran since
    assert cat.entry("corpus@1-clean-dedup").derived_from == "corpus@1-clean"

    spec = client.prepare(JobSpec(name="t", script="train.py", mounts=("corpus", "corpus@1-clean")))
    assert spec.mount_versions == {"corpus": "corpus@1", "corpus@1-clean": "corpus@1-clean"}
    assert JobSpec.from_json(spec.to_json()).mount_versions == spec.mount_versions  # in spec.json

    cat.add_dataset("corpus", _folder(tmp_path, "v2", 50), version="2")  # a new original does move the name
    assert cat.entry("corpus").ref == "corpus@2"

    assert main(["store", "ls"]) == 0
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "corpus: 1 -> 1-clean -> 1-clean-dedup" in out


def test_the_job_list_and_the_monitor_name_the_mounted_versions(client: Starverse, tmp_path: Path,
                                                                  capsys: object) -> None:  # fmt: skip
    import json
    import time

    from jupyter_starverse.cli._jobs import JobList
    from jupyter_starverse.experiments import JobIndex
    from jupyter_starverse.jobmodel import Job, JobState
    from jupyter_starverse.watch import JobProgress
    from jupyter_starverse.widgets.monitor import JobMonitor

    client.catalog.add_dataset("corpus", _folder(tmp_path, "raw", 3))
    spec = client.prepare(JobSpec(name="mnt", script="train.py", mounts=("corpus",)))
    assert spec.mounted == ("corpus@1",)
    run = Path(client.settings.experiments) / "mnt" / "runs" / "mnt-1"  # the record a launch writes
    run.mkdir(parents=True)
    (run / "spec.json").write_text(json.dumps(spec.to_json()))
    # a new original later moves the bare name, not what the job is listed as having read
    client.catalog.add_dataset("corpus", _folder(tmp_path, "v2", 9), version="2")

    row = next(s for s in JobIndex(Path(client.settings.experiments)).summaries() if s.id == "mnt-1")
    assert row.mounts == ("corpus@1",) and row.to_json()["mounts"] == ["corpus@1"]
    lines = str(JobList((row,))).splitlines()
    assert lines[0].split()[-1] == "MOUNTS" and lines[1].endswith("corpus@1")
    assert main(["jobs", "ls"]) == 0
    assert "corpus@1" in capsys.readouterr().out  # type: ignore[attr-defined]

    job = Job("mnt-1", "local", spec, JobState.RUNNING, str(run), time.time())

    class Handle:  # what the monitor polls
        id = job.id

        def __init__(self) -> None:
            self.job = job

        def progress(self, job: Job) -> JobProgress:
            return client.watch(job.id, backend="local").progress(job=job)

        def tail(self, n: int, job: Job) -> list[object]:
            return []

    monitor = JobMonitor(Handle(), start=False)  # type: ignore[arg-type]
    monitor.refresh()
    assert "mounts corpus@1" in monitor.title.value
    monitor.close()
