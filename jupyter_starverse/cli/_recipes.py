"""``starverse recipes ...`` (and ``%sv recipes ...``): the recipe catalog, publishing a result.

::

    starverse recipes ls                                   # every recipe, its defaults and cost
    starverse recipes show cpt
    starverse launch --recipe cpt --model hf:ORG/NAME --data corpus --param lr=3e-4 --procs 8 --gpu a100-80g
    starverse launch --recipe cogvlm-stage1 --small         # a reproduction: tiny LLaVA + image-text data, on CPU
    starverse recipes publish JOB_ID --repo ORG/NAME-cpt@v1   # the job's model folder into the store
    starverse recipes lineage hf:ORG/NAME-cpt@v1
    starverse recipes pretokenize corpus --model hf:ORG/NAME --name corpus-megatron   # Megatron .bin/.idx

``--recipe/--model/--data/--param`` are options of ``launch`` and ``%%sv train`` (see
:func:`add_recipe_options`); a ``%%sv train --recipe NAME`` cell with a body runs the body instead
of the recipe's trainer, with the same arguments.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from ._common import add_json_flag

if TYPE_CHECKING:
    from jupyter_starverse.client import Starverse
    from jupyter_starverse.jobmodel import JobSpec

__all__ = ["add_recipe_options", "recipe_spec", "register"]


def _pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE")
    return key, value


def add_recipe_options(p: argparse.ArgumentParser) -> None:
    """``--recipe NAME --model hf:ORG/NAME --data DATASET --param NAME=VALUE`` (launch, %%sv train)."""
    g = p.add_argument_group("recipe (`starverse recipes ls`)")
    g.add_argument("--recipe", default=None, metavar="NAME", help="run this recipe instead of a script")
    g.add_argument("--model", default=None, metavar="hf:ORG/NAME", help="store model the recipe starts from")
    g.add_argument("--data", action="append", default=[], metavar="DATASET", help="store dataset (repeatable)")
    g.add_argument("--param", action="append", type=_pair, default=[], metavar="NAME=VALUE", help="recipe parameter")
    g.add_argument(
        "--small",
        action="store_true",
        help="a reproduction's CPU-sized configuration (its tiny model and generated data unless --model/--data)",
    )


def recipe_spec(
    client: Starverse, args: argparse.Namespace, fields: dict[str, Any], *, code: str | None = None
) -> JobSpec | None:
    """The JobSpec of ``--recipe`` (``None`` without it); ``fields`` are the launch options' JobSpec fields."""
    from jupyter_starverse.errors import BadInputError

    if getattr(args, "recipe", None) is None:
        for flag in ("model", "data", "param"):
            if getattr(args, flag, None):
                raise BadInputError(
                    f"--{flag} is an option of --recipe", field=flag, hint="add --recipe NAME (`starverse recipes ls`)"
                )
        return None
    if getattr(args, "script", None) or isinstance(getattr(args, "command", None), list):  # launch's own
        raise BadInputError(
            "give either --recipe or a script/--command",
            field="recipe",
            hint="a recipe brings its own trainer; a %%sv train cell may replace it",
        )
    return client.recipes.spec(
        args.recipe,
        model=args.model,  # a reproduction brings its own (the tiny one with --small)
        data=tuple(args.data),
        params=dict(args.param),
        name=args.name if args.name not in (None, "train") else None,
        code=code,
        small=bool(args.small),
        **fields,
    )


def _ls(client: Starverse, args: argparse.Namespace) -> object:
    return client.recipes.ls()


def _show(client: Starverse, args: argparse.Namespace) -> object:
    return client.recipes.show(args.name)


def _publish(client: Starverse, args: argparse.Namespace) -> object:
    job = client.attach(args.job_id, backend=args.backend)
    return client.recipes.publish(job, repo=args.repo)


def _lineage(client: Starverse, args: argparse.Namespace) -> object:
    return client.recipes.lineage(args.model)


def _pretokenize(client: Starverse, args: argparse.Namespace) -> object:
    return client.recipes.pretokenize(args.dataset, model=args.model, name=args.name, version=args.version)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    top = sub.add_parser("recipes", help="training recipes: CPT, SFT, DPO, KTO, reward, frameworks, reproductions")
    cmds = top.add_subparsers(dest="recipes_command", metavar="SUBCOMMAND", parser_class=type(top))
    cmds.required = True

    p = cmds.add_parser("ls", help="every recipe with its defaults and cost")
    add_json_flag(p)
    p.set_defaults(run=_ls)

    p = cmds.add_parser("show", help="one recipe: parameters, parallelism, resources, cost, reproduction")
    p.add_argument("name", metavar="NAME")
    add_json_flag(p)
    p.set_defaults(run=_show)

    p = cmds.add_parser("publish", help="import a finished recipe job's model into the store, with its lineage")
    p.add_argument("job_id", metavar="JOB_ID")
    p.add_argument("--repo", required=True, metavar="ORG/NAME@VERSION", help="the new model version")
    p.add_argument("--backend", default=None, help="local, kubernetes or slurm (default: whichever knows the job)")
    add_json_flag(p)
    p.set_defaults(run=_publish)

    p = cmds.add_parser("lineage", help="what a published model came from (base, data, recipe, run)")
    p.add_argument("model", metavar="hf:ORG/NAME@VERSION")
    add_json_flag(p)
    p.set_defaults(run=_lineage)

    p = cmds.add_parser("pretokenize", help="text dataset -> Megatron .bin/.idx, as a new store dataset")
    p.add_argument("dataset", metavar="DATASET")
    p.add_argument("--model", required=True, metavar="hf:ORG/NAME", help="whose tokenizer")
    p.add_argument("--name", required=True, help="name of the new dataset")
    p.add_argument("--version", default="v1", help="its version (default v1)")
    add_json_flag(p)
    p.set_defaults(run=_pretokenize)
