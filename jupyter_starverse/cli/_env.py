"""``starverse env ls|show|rm|build|image``: job environments on the store.

An environment holds what a job's Python has beyond its image (``launch --env-from``), built
once per lock hash; ``build`` makes one ahead of a launch, ``image`` records an image's packages.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._common import add_json_flag

if TYPE_CHECKING:
    from jupyter_starverse.client import Starverse

__all__ = ["register"]


@dataclass(frozen=True)
class EnvShown:
    """One environment record, as ``env show`` / ``env rm`` print it."""

    data: dict[str, Any]
    removed: bool = False

    def to_json(self) -> dict[str, Any]:
        return {**self.data, "removed": self.removed}

    def __str__(self) -> str:
        d = self.data
        head = "removed " if self.removed else ""
        lines = [f"{head}environment {d['id']}", f"size        {d['size']} bytes", f"build       {d['build_s']} s",
                 f"lock        {d['lock'].get('kind')} for Python {d['lock'].get('python')}", "packages"]  # fmt: skip
        return "\n".join(lines + [f"  {p}" for p in d["packages"]])


@dataclass(frozen=True)
class Recorded:
    path: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path}

    def __str__(self) -> str:
        return f"recorded {self.path}"


def _ls(client: Starverse, args: argparse.Namespace) -> object:
    return client.envs.ls()


def _show(client: Starverse, args: argparse.Namespace) -> object:
    return EnvShown(client.envs.show(args.id).to_json())


def _rm(client: Starverse, args: argparse.Namespace) -> object:
    return EnvShown(client.envs.rm(args.id).to_json(), removed=True)


def _build(client: Starverse, args: argparse.Namespace) -> object:
    target = client.backend(args.backend).env_target(_probe(args)) if args.backend else None
    return client.envs.build(args.env_from, target)


def _probe(args: argparse.Namespace) -> Any:
    from jupyter_starverse.jobmodel import JobSpec

    return JobSpec(name="env-build", command=("true",), image=args.image, accelerator=args.gpu or "cpu")


def _image(client: Starverse, args: argparse.Namespace) -> object:
    return Recorded(str(client.envs.record_image(args.image, args.pip_list)))


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("env", help="job environments on the store (ls, show, rm, build, image)")
    env = p.add_subparsers(dest="env_command", metavar="COMMAND")
    ls = env.add_parser("ls", help="environments on the store")
    add_json_flag(ls)
    ls.set_defaults(run=_ls)
    for name, func, what in (("show", _show, "list the packages of"), ("rm", _rm, "remove")):
        q = env.add_parser(name, help=f"{what} an environment")
        q.add_argument("id", help="the environment's id (at least 4 characters)")
        add_json_flag(q)
        q.set_defaults(run=func)
    b = env.add_parser("build", help="build the environment of notebook or FILE now (once per lock hash)")
    b.add_argument("env_from", metavar="notebook|FILE", help="notebook, or a requirements / pyproject / lock file")
    b.add_argument("--backend", default=None, help="local, kubernetes or slurm (default: local)")
    b.add_argument("--image", default=None, help="the job image (kubernetes backend)")
    b.add_argument("--gpu", default=None, help="GPU type (picks the GPU image)")
    add_json_flag(b)
    b.set_defaults(run=_build)
    i = env.add_parser("image", help="record the packages of a container image (what environments add to)")
    i.add_argument("image", help="the image, e.g. registry/team/torch:2.13")
    i.add_argument("pip_list", metavar="PIP_LIST", help="`python -m pip list --format=freeze` run in the image")
    add_json_flag(i)
    i.set_defaults(run=_image)
