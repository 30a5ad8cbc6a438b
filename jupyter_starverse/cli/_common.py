"""What every command module shares: the parser class, output rendering, exit codes."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator, MutableMapping
from typing import TYPE_CHECKING, Any, NoReturn

from .._json import to_jsonable
from ..errors import BadInputError, StarverseError, error_kind

if TYPE_CHECKING:
    from ..catalog import PullProgress
    from ..client import Starverse

__all__ = [
    "CommandParser",
    "HelpShown",
    "Presenter",
    "UsageError",
    "add_json_flag",
    "exit_code_for",
    "notes",
    "render",
    "to_jsonable",
]


class Presenter:
    """How the front door that runs a command shows live things: the terminal's, text only.

    The command table is shared by the CLI and the ``%sv`` magics; commands return core
    objects and ask the presenter for what only a notebook can do (a progress widget, the
    kernel's variables, a toggle). The magics pass a presenter that draws widgets, so no
    command module imports a widget or IPython.
    """

    notebook = False

    def progress(self, label: str) -> tuple[Callable[[PullProgress], None], Callable[[], None]]:
        """``(update, close)`` callbacks for a long pull: a tqdm bar on stderr."""
        from ..catalog import tqdm_callback

        return tqdm_callback(desc=label)

    def namespace(self) -> MutableMapping[str, Any]:
        """The kernel's user namespace (variables a mode switch keeps)."""
        raise BadInputError("this runs inside a notebook kernel", hint="use `%sv mode ...` in a notebook cell")

    def mode_toggle(self, client: Starverse) -> object:
        """The GPU/CPU toggle widget."""
        raise BadInputError("--widget shows a toggle in a notebook", hint="run `%sv mode --widget` in a cell")

    def show(self, result: object) -> object:
        """What the front door displays for a command's ``result`` (the terminal renders it as text)."""
        return result


class UsageError(BadInputError):
    """The command line does not parse; the message includes the usage line."""


class HelpShown(Exception):
    """``--help`` was asked for; ``text`` holds the help."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser that raises instead of exiting, so the magics can use it in a kernel."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}", hint=f"usage: {self.format_usage().strip()[7:]}")

    def _print_message(self, message: str, file: Any = None) -> None:
        # --help and --version print, then exit: keep the text for HelpShown instead.
        self._shown = getattr(self, "_shown", "") + message

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            raise UsageError(message.strip())
        raise HelpShown(getattr(self, "_shown", "") or self.format_help())


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    """``--json``: print machine-readable output instead of a table."""
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def render(result: Any, *, as_json: bool, _stream: bool = False) -> Iterator[str]:
    """Lines to print on stdout for a command's result; generators are streamed item by item.

    With ``as_json`` a single result is one indented JSON document and a stream (a generator)
    is NDJSON: one compact object per line. A result with a ``document`` (a dry run's
    rendered plan) prints exactly that document; its ``notes`` go elsewhere (see :func:`notes`).
    """
    if result is None:
        return
    if isinstance(result, Iterator):
        for item in result:
            yield from render(item, as_json=as_json, _stream=True)
        return
    if as_json:
        yield json.dumps(to_jsonable(result), indent=None if _stream else 2, sort_keys=False, ensure_ascii=False)
    elif isinstance(getattr(result, "document", None), str):
        yield result.document.rstrip("\n")
    elif isinstance(result, (list, tuple)):
        for item in result:
            yield str(item)
    else:
        yield str(result)


def notes(result: Any, *, as_json: bool) -> list[str]:
    """Comment lines that go with a result but not into its document (printed on stderr)."""
    if as_json or isinstance(result, Iterator):
        return []
    found = getattr(result, "notes", None)
    if isinstance(found, (list, tuple)) and isinstance(getattr(result, "document", None), str):
        return [f"# {line}" for line in found]
    return []


# Exit codes per error family (errors.error_kind).
_EXIT = {"bad_input": 2, "not_found": 3, "conflict": 4, "unavailable": 5, "forbidden": 6}


def exit_code_for(error: StarverseError) -> int:
    """Exit codes: 2 bad input, 3 not found, 4 conflict, 5 backend unavailable, 6 forbidden, 1 other."""
    return _EXIT.get(error_kind(error), 1)
