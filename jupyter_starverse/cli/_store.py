"""``starverse store ...`` (and ``%sv store ...``), plus the top-level ``mount`` verb.

| command                                      | returns                         |
|----------------------------------------------|---------------------------------|
| store ls [--json]                            | StoreListing (table)            |
| store add NAME SOURCE [--version V]          | Entry                           |
| store pull REF [--connections N] [--allow G] [--ignore G] | EntryStatus (progress on stderr or a widget) |
| store mount REF [--json] / mount REF         | pathlib.Path                    |
| store status REF [--json]                    | EntryStatus                     |
| store verify REF [--json]                    | VerifyReport (exit 4 when corrupt)|
| store import-model PATH --as ORG/REPO        | Entry                           |
| store rm REF [--force]                       | removed refs                    |
| store evict --max-bytes N [--force]          | evicted entries                 |

``mount``, ``status`` and ``ls`` compare each file's size, mtime and ctime with the manifest (one
stat per file): an entry changed since it was published is ``corrupt`` with the files named, and
``mount`` refuses it (exit 4); ``verify`` hashes and names them, ``pull`` repairs.
``rm``/``evict`` refuse (ConflictError, HTTP 409) while a running job holds an entry;
``--force`` removes it under the job. Only an entry's owner (or root, or a member of
``STARVERSE_ADMIN_GROUP``) may remove, evict, repair or add a version of it
(PermissionDeniedError, exit 6); ``ls``/``status`` show the owner.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._common import Presenter, add_json_flag

if TYPE_CHECKING:
    from jupyter_starverse.catalog import (
        Entry,
        EntryStatus,
        PullProgress,
        StoreListing,
        VerifyReport,
    )
    from jupyter_starverse.client import Starverse

__all__ = ["parse_size", "register"]

_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def parse_size(text: str) -> int:
    """``'10G'`` -> bytes (binary units; ``B``/``iB`` suffixes allowed)."""
    from jupyter_starverse.errors import BadInputError

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", text.lower())
    if not m:
        raise BadInputError(f"{text!r} is not a size", field="max_bytes", hint="write bytes or e.g. 500M, 20G")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def _progress(args: argparse.Namespace, ref: str) -> tuple[Callable[[PullProgress], None], Callable[[], None]]:
    presenter: Presenter = args.presenter
    return presenter.progress(ref)


def _ls(client: Starverse, args: argparse.Namespace) -> StoreListing:
    from jupyter_starverse.catalog import StoreListing

    return StoreListing(tuple(client.catalog.ls()))


def _add(client: Starverse, args: argparse.Namespace) -> Entry:
    return client.catalog.add_dataset(
        args.name, args.source, version=args.version, description=args.description, license=args.license
    )


def _pull(client: Starverse, args: argparse.Namespace) -> EntryStatus:
    # bad options, then a mistyped dataset (did you mean?), refused before any progress bar is drawn
    from jupyter_starverse.catalog import check_pull_options, parse_ref

    check_pull_options(parse_ref(args.ref), connections=args.connections, allow=args.allow or None,
                       ignore=args.ignore or None)  # fmt: skip
    if not str(args.ref).startswith("hf:"):
        client.catalog.entry(args.ref)
    update, close = _progress(args, args.ref)
    try:
        return client.catalog.pull(
            args.ref,
            progress=update,
            connections=args.connections,
            allow=args.allow or None,
            ignore=args.ignore or None,
        )
    finally:
        close()


def _mount(client: Starverse, args: argparse.Namespace) -> Path:
    return client.catalog.mount(args.ref)


def _status(client: Starverse, args: argparse.Namespace) -> EntryStatus:
    return client.catalog.status(args.ref)


def _import(client: Starverse, args: argparse.Namespace) -> Entry:
    update, close = _progress(args, args.repo)
    try:
        return client.catalog.import_model(args.path, repo=args.repo, progress=update)
    finally:
        close()


def _verify(client: Starverse, args: argparse.Namespace) -> VerifyReport:
    from jupyter_starverse.errors import ConflictError

    report = client.catalog.verify(args.ref)
    if report.ok or args.notebook:
        return report
    # A script checks the exit status: print the report, then fail (exit 4, as for a conflict).
    print(json.dumps(report.to_json(), indent=2) if args.json else str(report), flush=True)
    what = "owner changed" if report.owner_changed else "files changed"
    raise ConflictError(
        f"{report.ref} is corrupt ({what})",
        hint=f"its owner repairs it with `starverse store pull {report.ref}`"
        + (
            "; files another user owns need its owner or an admin to `store rm` it first"
            if report.owner_changed
            else ""
        ),
    )


def _show(client: Starverse, args: argparse.Namespace) -> object:
    return client.evals.card(args.ref)


def _rm(client: Starverse, args: argparse.Namespace) -> list[str]:
    return [f"removed {ref}" for ref in client.catalog.rm(args.ref, force=args.force)]


def _evict(client: Starverse, args: argparse.Namespace) -> list[EntryStatus]:
    return client.catalog.evict(max_bytes=parse_size(args.max_bytes), force=args.force)


_FORCE_HELP = "remove even while a running job holds the entry (its reads will fail)"


def _ref_parser(
    sub: Any, name: str, help_: str, run: Callable[[Starverse, argparse.Namespace], object]
) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(name, help=help_)
    p.add_argument(
        "ref", metavar="REF", help="dataset NAME[@VERSION], hf:ORG/REPO[@REVISION] or hf:datasets/ORG/NAME[@REVISION]"
    )
    add_json_flag(p)
    p.set_defaults(run=run)
    return p


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    store = sub.add_parser("store", help="datasets and Hugging Face models on the shared store")
    verbs = store.add_subparsers(dest="store_command", metavar="VERB", parser_class=type(store))

    p = verbs.add_parser("ls", help="list entries with cache state, size and last use")
    add_json_flag(p)
    p.set_defaults(run=_ls)

    p = verbs.add_parser("add", help="register a dataset (a folder or an fsspec URL)")
    p.add_argument("name", metavar="NAME")
    p.add_argument("source", metavar="SOURCE", help="folder, file://, memory://, http(s)://, s3://, gs:// ...")
    p.add_argument("--version", default=None, help="version label (default 1)")
    p.add_argument("--description", default=None)
    p.add_argument("--license", default=None)
    add_json_flag(p)
    p.set_defaults(run=_add)

    p = _ref_parser(verbs, "pull", "fill the store once (concurrent pulls share one download)", _pull)
    p.add_argument(
        "--connections",
        type=int,
        default=None,
        metavar="N",
        help="connections per large file (up to 4 files at once), or small files at once"
        " (default STARVERSE_PULL_CONNECTIONS, 8)",
    )
    p.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="GLOB",
        help="only files of a Hugging Face repo matching GLOB (repeatable), e.g. 'data/en/*'",
    )
    p.add_argument(
        "--ignore", action="append", default=[], metavar="GLOB", help="skip files of a Hugging Face repo matching GLOB"
    )
    _ref_parser(verbs, "mount", "print the read-only path of a pulled entry", _mount)
    _ref_parser(verbs, "status", "cache state of one entry", _status)
    _ref_parser(verbs, "show", "cache state and every evaluation score of one entry", _show)
    _ref_parser(verbs, "verify", "check every cached file against the size and sha256 recorded at pull", _verify)
    p = _ref_parser(verbs, "rm", "remove an entry and its bytes", _rm)
    p.add_argument("--force", action="store_true", help=_FORCE_HELP)

    p = verbs.add_parser("import-model", help="copy a local Hugging Face model folder into the store")
    p.add_argument("path", metavar="PATH")
    p.add_argument("--as", dest="repo", required=True, metavar="ORG/REPO", help="model name, e.g. my-org/llama-ft")
    add_json_flag(p)
    p.set_defaults(run=_import)

    p = verbs.add_parser("evict", help="drop least recently used entries until the store fits a budget")
    p.add_argument("--max-bytes", required=True, metavar="SIZE", help="budget, e.g. 500G")
    p.add_argument("--force", action="store_true", help=_FORCE_HELP)
    add_json_flag(p)
    p.set_defaults(run=_evict)

    p = sub.add_parser("mount", help="path of a pulled store entry (%%sv mount returns a pathlib.Path)")
    p.add_argument("ref", metavar="REF", help="dataset NAME[@VERSION] or hf:ORG/REPO[@REVISION]")
    add_json_flag(p)
    p.set_defaults(run=_mount)
