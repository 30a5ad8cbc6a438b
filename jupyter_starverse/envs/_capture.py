"""What a job's environment must add to its image: capture, the image's known set, the diff, the lock.

``notebook``: the distributions the kernel's interpreter sees (``importlib.metadata``) that the
job's interpreter or image lacks. ``FILE``: the requirements of a ``requirements.txt`` /
lock (``pip freeze`` output) or a ``pyproject.toml``'s ``[project] dependencies``. ``image``:
nothing. The result is a :class:`Lock` whose hash names the environment on the store.

Distributions that come with Jupyter and this package (the kernel's tooling) are left out unless
a package the user installed needs them; a package the image already has is taken from the image
(never shadowed: the image's torch is the one built for its CUDA), whatever version the kernel has.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_starverse.errors import BadInputError

__all__ = ["Dist", "Lock", "capture_notebook", "diff", "image_set", "lock_from_file", "norm", "python_set"]

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
#: what the kernel has for Jupyter and this package: never copied into a job's environment
TOOLING = ("jupyter-starverse", "jupyterlab", "notebook", "jupyter-server", "ipykernel", "ipywidgets", "jupyter",
           "nbclassic", "voila", "pip", "setuptools", "wheel", "uv", "ipython")  # fmt: skip
_DATA = Path(__file__).with_name("image_sets.json")


def norm(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Dist:
    """One installed distribution: name, version, and (when installed here) its files' folder and size."""

    name: str
    version: str
    location: str | None = None
    size: int = 0
    requires: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return norm(self.name)

    @property
    def pin(self) -> str:
        return f"{self.name}=={self.version}"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "size": self.size}


@dataclass(frozen=True)
class Lock:
    """Exactly what an environment holds: pinned requirements for one Python version.

    ``kind``: ``notebook`` (pins of the kernel's distributions, installed without dependencies from
    wheels made of the kernel's own files or the store's wheel cache) or ``file`` (requirements as
    written, resolved by pip). The hash of this record names the environment on the store.
    """

    kind: str
    requirements: tuple[str, ...]
    python: str
    source: str = ""
    dists: tuple[Dist, ...] = ()  # notebook: the distributions the pins came from (for wheels, sizes)
    notes: tuple[str, ...] = field(default=(), compare=False)

    @property
    def hash(self) -> str:
        body = {"kind": self.kind, "python": self.python, "requirements": sorted(self.requirements)}
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()

    @property
    def size(self) -> int:
        return sum(d.size for d in self.dists)

    @property
    def empty(self) -> bool:
        return not self.requirements

    def to_json(self) -> dict[str, Any]:
        return {
            "hash": self.hash,
            "kind": self.kind,
            "python": self.python,
            "source": self.source,
            "requirements": sorted(self.requirements),
            "size": self.size,
            "notes": list(self.notes),
        }


def _req_name(text: str) -> str | None:
    if "extra ==" in text.replace('"', "'").replace("extra==", "extra =="):
        return None
    m = _NAME.match(text)
    return norm(m.group(1)) if m else None


def _dist_size(dist: md.Distribution) -> int:
    total = 0
    for f in dist.files or ():
        if f.size:
            total += int(f.size)
    return total


def sized(d: Dist) -> Dist:
    """``d`` with the size of its installed files."""
    if d.location is None:
        return d
    found = [x for x in md.distributions(path=[d.location]) if norm(x.metadata["Name"] or "") == d.key]
    return Dist(d.name, d.version, d.location, _dist_size(found[0]) if found else 0, d.requires)


def capture_notebook(paths: Sequence[str] | None = None) -> list[Dist]:
    """The distributions the kernel sees (``paths``: its ``sys.path``), first on the path first."""
    seen: dict[str, Dist] = {}
    for dist in md.distributions(path=list(paths if paths is not None else sys.path)):
        name = dist.metadata["Name"]
        if not name or norm(name) in seen:
            continue
        location = getattr(dist, "_path", None)
        seen[norm(name)] = Dist(
            name=name,
            version=dist.version,
            location=str(Path(str(location)).parent) if location is not None else None,
            size=0,  # sized only when it is in the diff (sized()): RECORDs of every package cost a second
            requires=tuple(dist.requires or ()),
        )
    return list(seen.values())


_LIST = (
    "import importlib.metadata as m, json, sys; "
    "print(json.dumps({'python': '%d.%d' % sys.version_info[:2], "
    "'dists': sorted({d.metadata['Name']: d.version for d in m.distributions() if d.metadata['Name']}.items())}))"
)


_SEEN: dict[tuple[str, str, int], tuple[str, dict[str, str]]] = {}


def _site_stamp(python: str) -> int:
    """Changes when packages are installed into the interpreter's prefix (its site folders' mtimes)."""
    prefix = Path(python).absolute().parent.parent
    return sum(p.stat().st_mtime_ns for p in prefix.glob("lib/python3*/site-packages") if p.is_dir())


def python_set(python: str, *, env: Mapping[str, str] | None = None) -> tuple[str, dict[str, str]]:
    """(Python version, {name: version}) that the interpreter ``python`` sees with the launcher's environment.

    Kept per process until a package is installed into that interpreter's prefix."""
    key = (python, os.environ.get("PYTHONPATH", "") if env is None else env.get("PYTHONPATH", ""), _site_stamp(python))
    if key in _SEEN:
        return _SEEN[key][0], dict(_SEEN[key][1])
    try:
        out = subprocess.run([python, "-c", _LIST], capture_output=True, text=True, timeout=60, env=env, check=True)
        data = json.loads(out.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        raise BadInputError(
            f"the job's Python {python!r} could not list its packages: {e}",
            field="env_from",
            hint="check STARVERSE_SLURM_PYTHON (or the interpreter the job runs), or launch with --env-from image",
        ) from e
    _SEEN[key] = (str(data["python"]), {norm(k): str(v) for k, v in data["dists"]})
    return _SEEN[key][0], dict(_SEEN[key][1])


def image_set(image: str, records: Iterable[Path] = ()) -> tuple[str, dict[str, str], bool]:
    """(Python version, {name: version}, known) of a container image.

    Looked up in the store's records (``starverse env image``), then in the shipped list of the
    default image (generated from docs/image/Dockerfile's pins); an unknown image falls back to the
    default image's list (``known`` False: the preview says so).
    """
    for path in records:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("image") == image:
            return str(data.get("python", "")), {norm(k): str(v) for k, v in dict(data.get("dists", {})).items()}, True
    shipped = json.loads(_DATA.read_text())
    for entry in shipped["images"]:
        if image.split(":")[0] == entry["repository"]:
            return entry["python"], {norm(k): v for k, v in entry["dists"].items()}, True
    entry = shipped["images"][0]
    return entry["python"], {norm(k): v for k, v in entry["dists"].items()}, False


def _closure(roots: Iterable[str], by_name: Mapping[str, Dist]) -> set[str]:
    out: set[str] = set()
    todo = [norm(r) for r in roots]
    while todo:
        key = todo.pop()
        if key in out or key not in by_name:
            continue
        out.add(key)
        todo += [n for n in (_req_name(r) for r in by_name[key].requires) if n]
    return out


def diff(kernel: Sequence[Dist], image: Mapping[str, str]) -> tuple[list[Dist], list[str]]:
    """What the kernel has that the image lacks (its tooling left out), and notes on versions that differ."""
    by_name = {d.key: d for d in kernel}
    tooling = _closure(TOOLING, by_name)
    wanted = [d for d in kernel if d.key not in image and d.key not in tooling]
    needs = _closure([d.key for d in wanted], by_name)  # what the user's packages need comes along
    out = [sized(by_name[k]) for k in sorted(needs) if k not in image]
    notes = [
        f"{d.name}: the kernel has {d.version}, the job keeps the image's {image[d.key]}"
        for d in kernel
        if d.key in image and d.key not in tooling and image[d.key] and image[d.key] != d.version
    ]
    return out, notes[:20]


def _requirement_lines(path: Path) -> list[str]:
    if path.name == "pyproject.toml" or (path.suffix == ".toml" and path.name != "pylock.toml"):
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # Python 3.10
            import tomli as tomllib  # type: ignore[import-not-found]
        try:
            data = tomllib.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise BadInputError(f"--env-from {path}: not a readable TOML file ({e})", field="env_from") from e
        deps = data.get("project", {}).get("dependencies")
        if not isinstance(deps, list):
            raise BadInputError(
                f"--env-from {path}: no [project] dependencies list",
                field="env_from",
                hint="list the packages under [project] dependencies = [...], or give a requirements.txt",
            )
        return [str(d).strip() for d in deps if str(d).strip()]
    lines = []
    for raw in path.read_text().splitlines():
        line = raw.split(" #")[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-"):
            raise BadInputError(
                f"--env-from {path}: pip options such as {line.split()[0]!r} are not taken",
                field="env_from",
                hint="list requirements only, one per line (name==version); wheels come from the store's cache "
                "or the index",
            )
        lines.append(line)
    return lines


def lock_from_file(path: str, python: str, image: Mapping[str, str]) -> Lock:
    """The lock of a requirements file, lock (``pip freeze``) or ``pyproject.toml``."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise BadInputError(
            f"--env-from {path!r}: no such file",
            field="env_from",
            hint="give notebook, image, or a requirements.txt / pyproject.toml / lock file",
        )
    try:
        lines = _requirement_lines(file)
    except (OSError, UnicodeDecodeError) as e:
        raise BadInputError(f"--env-from {path}: cannot read it ({e})", field="env_from") from e
    for line in lines:
        if _req_name(line) is None:
            raise BadInputError(f"--env-from {path}: {line!r} is not a requirement", field="env_from",
                                hint="write one requirement per line, e.g. rich==13.7.1")  # fmt: skip
    keep = [line for line in lines if _req_name(line) not in image]
    notes = [f"{line}: the image has it already" for line in lines if _req_name(line) in image]
    return Lock("file", tuple(keep), python, source=str(file.absolute()), notes=tuple(notes))
