"""``starverse serve MODEL`` (and ``%sv serve``): an OpenAI-compatible endpoint of a model.

``serve MODEL`` starts it on this host (a detached process with its own run folder; the token
is in the folder, 0600); ``--backend kubernetes|slurm --dry-run`` prints the Deployment +
Service or the batch script of the same endpoint. ``serve ls`` lists endpoints with their
lineage, ``serve stop ID`` stops one and frees its port, ``serve token ID`` prints its token.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ._common import add_json_flag

if TYPE_CHECKING:
    from jupyter_starverse.client import Starverse

__all__ = ["register"]

_ENGINES = ("auto", "transformers", "onnxruntime", "vllm")


def _serve(client: Starverse, args: argparse.Namespace) -> object:
    from jupyter_starverse.errors import BadInputError

    if args.backend not in (None, "local"):
        if not args.dry_run:
            raise BadInputError(
                f"serving on {args.backend} is rendered, not applied, from here",
                field="backend", hint="add --dry-run and apply the output (kubectl apply -f / sbatch)",
            )  # fmt: skip
        spec = client.serve.spec(
            args.model, engine=args.engine, accelerator=args.gpu or "cpu", gpus=args.gpus, replicas=args.replicas,
            token_secret=args.token_secret, name=args.name, max_tokens=args.max_tokens,
        )  # fmt: skip
        output = "sbatch" if args.backend == "slurm" else "yaml"
        return client.serve.render(spec, client.backend(args.backend), output=output)
    return client.serve.start(
        args.model, engine=args.engine, port=args.port, host=args.host, name=args.name,
        idle_exit=args.idle_exit, max_tokens=args.max_tokens, threads=args.threads,
    )  # fmt: skip


def _main(client: Starverse, args: argparse.Namespace) -> object:
    from jupyter_starverse.errors import BadInputError

    words = list(args.words)
    action = words[0]
    if action in ("stop", "token"):
        if len(words) != 2:
            raise BadInputError(
                f"serve {action} takes one endpoint id", field="id", hint=f"`starverse serve {action} ID`"
            )
        return client.serve.stop(words[1]) if action == "stop" else client.serve.token(words[1])
    if action == "ls":
        if len(words) != 1:
            raise BadInputError("serve ls takes no argument", field="id", hint="`starverse serve ls [--all]`")
        return client.serve.ls(all=args.all)
    if len(words) != 1:
        raise BadInputError("serve takes one model", field="model", hint="`starverse serve MODEL [--engine ...]`")
    args.model = action
    return _serve(client, args)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    q = sub.add_parser(
        "serve",
        help="serve a model as an OpenAI-compatible API (here, or rendered for Kubernetes / Slurm)",
        description="`serve MODEL` (hf:ORG/REPO@REV, an ONNX export, exp:EXPERIMENT or a folder) starts an endpoint "
        "here; `serve ls [--all]`, `serve stop ID`, `serve token ID` manage them.",
    )
    q.add_argument("words", nargs="+", metavar="MODEL | ls | stop ID | token ID")
    q.add_argument("--all", action="store_true", help="ls: stopped endpoints too")
    q.add_argument("--engine", choices=_ENGINES, default="auto", help="default: by the model's format")
    q.add_argument("--port", type=int, default=0, help="local port (default: a free one)")
    q.add_argument("--host", default="127.0.0.1", help="listening address (default: loopback only)")
    q.add_argument("--name", default=None, help="the model name clients pass (default: MODEL)")
    q.add_argument("--idle-exit", type=float, default=0.0, metavar="S", help="stop after S idle seconds")
    q.add_argument("--max-tokens", type=int, default=512, metavar="N", help="largest max_tokens served")
    q.add_argument("--threads", type=int, default=1, metavar="N", help="CPU threads of the engine")
    g = q.add_argument_group("cluster rendering")
    g.add_argument("--backend", choices=("local", "kubernetes", "slurm"), default=None, help="local, kubernetes, slurm")
    g.add_argument("--dry-run", action="store_true", help="print the manifests / script; start nothing")
    g.add_argument("--gpu", default=None, metavar="TYPE", help="GPU type (vLLM by default on GPUs)")
    g.add_argument("--gpus", type=int, default=1, help="GPUs per replica")
    g.add_argument("--replicas", type=int, default=1)
    g.add_argument("--token-secret", default="starverse-serve/token", metavar="NAME/KEY",
                   help="Kubernetes Secret holding the token (referenced, never copied)")  # fmt: skip
    add_json_flag(q)
    q.set_defaults(run=_main)
