"""``JobEnvs``: the job's environment follows the notebook (``Starverse.envs``).

``resolve(spec, target)`` turns a spec's request (``env_from``, ``workdir``) into what backends
receive: ``env_id`` (an environment on the store, by lock hash) and ``workdir_id`` (a packed
folder, by content hash). With ``build=True`` both are materialised first, once per hash.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from jupyter_starverse._format import pretty_text
from jupyter_starverse._settings import Settings
from jupyter_starverse._volume import PUBLIC, make_dir, write_atomic
from jupyter_starverse.catalog import Catalog
from jupyter_starverse.errors import BadInputError, NotFoundError
from jupyter_starverse.jobmodel import JobSpec

from ._build import BuildResult, EnvRecord, build_env, read_record, remove_env
from ._capture import Lock, capture_notebook, diff, image_set, lock_from_file, norm, python_set
from ._layout import EnvPaths
from ._workdir import WORKDIR_LIMIT, Workdir, pack_workdir, publish_workdir

__all__ = ["EnvList", "EnvPlan", "JobEnvs"]


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 1024:.0f} KiB"


@dataclass(frozen=True)
class EnvPlan:
    """What a launch adds to its image: the packages to install (and their size) and the working folder."""

    env_from: str
    target: str
    lock: Lock | None
    built: bool
    workdir: Workdir | None = None
    notes: tuple[str, ...] = ()
    build: BuildResult | None = None

    @property
    def env_id(self) -> str | None:
        return None if self.lock is None or self.lock.empty else self.lock.hash

    def to_json(self) -> dict[str, Any]:
        return {
            "env_from": self.env_from,
            "target": self.target,
            "env_id": self.env_id,
            "built": self.built,
            "lock": self.lock.to_json() if self.lock is not None else None,
            "packages": [d.to_json() for d in self.lock.dists] if self.lock else [],
            "workdir": self.workdir.to_json() if self.workdir else None,
            "notes": list(self.notes),
            "build_s": self.build.seconds if self.build else None,
        }

    def lines(self) -> list[str]:
        out = []
        if self.env_id and self.lock is not None:
            state = "built, reused" if self.built else "built at launch, once"
            what = ", ".join(self.lock.requirements[:8]) + (" ..." if len(self.lock.requirements) > 8 else "")
            size = f", {_mib(self.lock.size)}" if self.lock.size else ""
            out.append(f"environment {self.env_id[:12]} ({state}): installs {len(self.lock.requirements)} "
                       f"package(s){size} over {self.target}: {what}")  # fmt: skip
        elif self.env_from != "image":
            out.append(f"environment: nothing to add, {self.target} has every package of --env-from {self.env_from}")
        if self.workdir is not None:
            out.append(f"working folder {self.workdir.source}: {self.workdir.files} file(s), {_mib(self.workdir.size)}"
                       f" (packed as {self.workdir.id[:12]}, unpacked read-only for every rank)")  # fmt: skip
        return out + [f"note: {n}" for n in self.notes]

    def __str__(self) -> str:
        return "\n".join(self.lines())


@dataclass(frozen=True)
class EnvList:
    """``starverse env ls``: the environments on the store."""

    records: tuple[EnvRecord, ...]

    def to_json(self) -> dict[str, Any]:
        return {"envs": [r.to_json() for r in self.records]}

    def __str__(self) -> str:
        if not self.records:
            return "no environments on the store (a launch with --env-from notebook|FILE builds one)"
        rows = [f"{'ID':<14}{'PACKAGES':>9}  {'SIZE':>10}  {'BUILD':>7}  CONTENT"]
        for r in self.records:
            rows.append(f"{r.id[:12]:<14}{len(r.packages):>9}  {_mib(r.size):>10}  {r.build_s:>6.1f}s  "
                        + ", ".join(r.packages[:4]) + (" ..." if len(r.packages) > 4 else ""))  # fmt: skip
        return "\n".join(rows)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))


class JobEnvs:
    """Job environments and working folders on the store.

    ``kernel_path``: the interpreter path that ``--env-from notebook`` captures (default: this
    process's ``sys.path``, which in a kernel is the notebook's).
    """

    def __init__(self, settings: Settings, *, kernel_path: Sequence[str] | None = None) -> None:
        self.settings = settings
        self.kernel_path = list(kernel_path) if kernel_path is not None else None
        self._prepared = False

    @property
    def paths(self) -> EnvPaths:
        if self.settings.shared_group and not self._prepared:
            Catalog(self.settings).prepare()  # group mode: envs/ and workdirs/ are the group's (3775)
            self._prepared = True
        return EnvPaths(self.settings.store)

    # -- the job's side ---------------------------------------------------------------------
    def target_set(self, target: str) -> tuple[str, dict[str, str], list[str]]:
        """(Python version, known distributions, notes) of ``python:PATH`` or ``image:NAME``."""
        kind, _, value = target.partition(":")
        if kind == "image":
            records = sorted(self.paths.images.glob("*.json")) if self.paths.images.is_dir() else []
            python, dists, known = image_set(value, records)
            notes = [] if known else [f"no package list recorded for image {value}: compared with the default "
                                      "image's (record one with `starverse env image IMAGE PIP_LIST`)"]  # fmt: skip
            return python, dists, notes
        python, dists = python_set(value or sys.executable)
        return python, dists, []

    def lock(self, env_from: str, target: str) -> tuple[Lock, list[str]]:
        """The lock of ``env_from`` (``notebook``, ``image`` or a file) against ``target``'s packages."""
        python, image, notes = self.target_set(target)
        if env_from == "image":
            return Lock("image", (), python), notes
        if env_from == "notebook":
            kernel = capture_notebook(self.kernel_path)
            missing, version_notes = diff(kernel, image)
            lock = Lock("notebook", tuple(d.pin for d in missing), python, source="notebook", dists=tuple(missing))
            return lock, notes + version_notes
        lock = lock_from_file(env_from, python, image)
        return lock, notes + list(lock.notes)

    def plan(self, spec: JobSpec, target: str) -> EnvPlan | None:
        """What launching ``spec`` adds (None: nothing asked); starts and writes nothing."""
        if spec.env_id is not None or (spec.env_from in (None, "image") and spec.workdir is None):
            return None
        env_from = spec.env_from or "image"
        lock, notes = self.lock(env_from, target)
        built = lock.empty or read_record(self.paths.record(lock.hash)) is not None
        workdir = None
        if spec.workdir is not None:
            exclude = (self.paths.root, Path(self.settings.experiments))
            workdir = pack_workdir(spec.workdir, limit=WORKDIR_LIMIT, exclude=exclude)
        return EnvPlan(env_from, target.partition(":")[2], lock, built, workdir, tuple(notes))

    def resolve(self, spec: JobSpec, target: str, *, build: bool) -> tuple[JobSpec, EnvPlan | None]:
        """``spec`` with ``env_id`` / ``workdir_id`` set; with ``build``, both exist on the store after this."""
        if spec.env_id is not None or spec.workdir_id is not None:  # resolved already (a resubmission)
            if build:
                self.check(spec)
            return spec, None
        plan = self.plan(spec, target)
        if plan is None:
            return spec, None
        if build:
            if plan.lock is not None and not plan.lock.empty:
                python = plan.lock.python
                image = self.target_set(target)[1] if plan.lock.kind == "file" else None
                result = build_env(plan.lock, self.paths, ttl=self.settings.lock_ttl, image=image,
                                   python_version=python)  # fmt: skip
                plan = replace(plan, build=result, built=True)
            if plan.workdir is not None:
                publish_workdir(plan.workdir, self.paths)
        return spec.replace(env_id=plan.env_id, workdir_id=plan.workdir.id if plan.workdir else None), plan

    def check(self, spec: JobSpec) -> None:
        """NotFoundError with the fix when the spec's environment or working folder is not on the store."""
        if spec.env_id is not None and read_record(self.paths.record(spec.env_id)) is None:
            raise NotFoundError(f"environment {spec.env_id[:12]} is not on the store",
                                hint="launch from the notebook again, or `starverse env build`")  # fmt: skip
        if spec.workdir_id is not None and not self.paths.workdir_tar(spec.workdir_id).is_file():
            raise NotFoundError(f"working folder {spec.workdir_id[:12]} is not on the store",
                                hint="launch again with --workdir: the launch packs it")  # fmt: skip

    # -- managing them ----------------------------------------------------------------------
    def ls(self) -> EnvList:
        envs = self.paths.envs
        records = []
        if envs.is_dir():
            for folder in sorted(envs.iterdir()):
                if folder.is_dir() and not folder.is_symlink() and not folder.name.startswith("."):
                    record = read_record(folder / "env.json")
                    if record is not None:
                        records.append(record)
        return EnvList(tuple(sorted(records, key=lambda r: -r.built)))

    def _find(self, env_id: str) -> EnvRecord:
        matches = [r for r in self.ls().records if r.id.startswith(env_id)] if len(env_id) >= 4 else []
        if len(matches) != 1:
            raise NotFoundError(
                f"no environment {env_id!r}" if not matches else f"{env_id!r} names {len(matches)} environments",
                hint="`starverse env ls` lists them; give at least 4 characters of an id",
            )
        return matches[0]

    def show(self, env_id: str) -> EnvRecord:
        return self._find(env_id)

    def rm(self, env_id: str) -> EnvRecord:
        record = self._find(env_id)
        from jupyter_starverse._volume import check_owned, group_id

        check_owned(self.paths.env(record.id), "remove the environment", group_id(self.settings.admin_group))
        remove_env(self.paths, record.id)
        return record

    def build(self, env_from: str, target: str | None = None) -> EnvPlan:
        """Build the environment of ``env_from`` now (``starverse env build``)."""
        spec = JobSpec(name="env-build", command=("true",), env_from=env_from)
        _, plan = self.resolve(spec, target or f"python:{sys.executable}", build=True)
        if plan is None:
            raise BadInputError("nothing to build for --env-from image", field="env_from",
                                hint="give notebook or a requirements file")  # fmt: skip
        return plan

    def record_image(self, image: str, pip_list: str) -> Path:
        """Record ``image``'s package list (``pip list --format=freeze`` or ``pip freeze`` run in it)."""
        path = Path(pip_list).expanduser()
        try:
            text = path.read_text()
        except OSError as e:
            raise BadInputError(f"cannot read {pip_list!r}: {e}", field="pip_list") from e
        dists: dict[str, str] = {}
        for line in text.splitlines():
            name, sep, version = line.strip().partition("==")
            if sep and name:
                dists[norm(name)] = version.strip()
        if not dists:
            raise BadInputError(f"{pip_list}: no name==version lines", field="pip_list",
                                hint="`docker run IMAGE python -m pip list --format=freeze > FILE`")  # fmt: skip
        python = next((v for k, v in dists.items() if k == "python"), "")
        make_dir(self.paths.images, PUBLIC)
        slug = "".join(c if c.isalnum() else "-" for c in image)[:200]
        out = self.paths.images / f"{slug}.json"
        write_atomic(out, json.dumps({"image": image, "python": python, "dists": dists}).encode(), 0o644)
        return out
