"""What every command module shares: the parser class, output rendering, exit codes."""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator, MutableMapping
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from .._json import to_jsonable
from ..errors import BadInputError, StarverseError, error_kind

if TYPE_CHECKING:
    from ..catalog import PullProgress
    from ..client import Starverse

__all__ = [
    "CommandParser",
    "HelpShown",
    "Presenter",
    "StatusLine",
    "UsageError",
    "add_json_flag",
    "door_text",
    "exit_code_for",
    "flag_of",
    "interrupted_text",
    "notes",
    "render",
    "to_jsonable",
    "tracking",
]

_SPINNER = "|/-\\"


class StatusLine:
    """One line on stderr saying what is happening now, from the first second of a long command.

    On a terminal it is redrawn in place with a spinner and the seconds elapsed; elsewhere (a
    pipe, a log file, a notebook cell) each new text is one line ``... text``. ``close`` clears
    the line (or leaves ``final`` in its place).
    """

    def __init__(self, stream: TextIO | None = None, *, tty: bool | None = None, every: float = 0.2) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = tty if tty is not None else bool(getattr(self.stream, "isatty", lambda: False)())
        self.text = ""
        self.started = time.monotonic()
        self._since = self.started
        self._width = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self.tty:
            self._thread = threading.Thread(target=self._spin, args=(every,), name="starverse-status", daemon=True)
            self._thread.start()

    def update(self, text: str) -> None:
        """Say what happens now (a repeated text only moves the spinner)."""
        with self._lock:
            if text == self.text:
                return
            self.text, self._since = text, time.monotonic()
            if self.tty:
                self._draw()
            else:
                print(f"... {text}", file=self.stream, flush=True)

    def _draw(self) -> None:
        frame = _SPINNER[int((time.monotonic() - self.started) / 0.2) % len(_SPINNER)]
        line = f"{frame} {self.text} ({time.monotonic() - self._since:.0f}s)"
        pad = " " * max(0, self._width - len(line))
        self.stream.write(f"\r{line}{pad}")
        self.stream.flush()
        self._width = len(line)

    def _spin(self, every: float) -> None:
        while not self._stop.wait(every):
            with self._lock:
                if self.text:
                    self._draw()

    def close(self, final: str | None = None) -> None:
        """Stop the spinner; ``final`` stays as the last line."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        with self._lock:
            if self.tty and self._width:
                self.stream.write("\r" + " " * self._width + "\r")
                self._width = 0
            if final:
                print(final, file=self.stream, flush=True)
            self.stream.flush()

    def __enter__(self) -> StatusLine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# The job a command is following right now, so Ctrl-C can say which one keeps running.
_TRACKED: list[tuple[str, str | None, str]] = []


@contextlib.contextmanager
def tracking(job_id: str, backend: str | None = None, *, what: str = "job") -> Iterator[None]:
    """While this lasts, an interrupt names ``job_id`` and how to follow or cancel it."""
    entry = (job_id, backend, what)
    _TRACKED.append(entry)
    try:
        yield
    except KeyboardInterrupt:
        raise  # kept: the front door's interrupt message names the job
    except BaseException:
        _untrack(entry)
        raise
    _untrack(entry)


def _untrack(entry: tuple[str, str | None, str]) -> None:
    with contextlib.suppress(ValueError):
        _TRACKED.remove(entry)


def interrupted_text() -> str:
    """What Ctrl-C prints: ``interrupted`` and, when a job was being followed, its id and the commands."""
    if not _TRACKED:
        return "interrupted"
    job_id, backend, what = _TRACKED[-1]
    _TRACKED.clear()
    flag = f" --backend {backend}" if backend and backend != "local" else ""
    return (
        f"interrupted; {what} {job_id} keeps running\n"
        f"  cancel it: starverse jobs cancel {job_id}{flag}\n"
        f"  follow it: starverse jobs logs -f {job_id}{flag}"
    )


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

    def chat(
        self, client: Starverse, model: str, *, feedback: str | None, endpoint: bool = False, token: str | None = None
    ) -> object:
        """The interactive chat with thumbs up/down (a widget in a notebook)."""
        raise BadInputError(
            "an interactive chat needs a notebook",
            hint=f"give --prompt TEXT, or run `%sv chat {'--endpoint ' if endpoint else ''}{model}` in a cell",
        )

    def show(self, result: object) -> object:
        """What the front door displays for a command's ``result`` (the terminal renders it as text)."""
        return result

    def status(self) -> StatusLine:
        """A line saying what a long command is doing now (stderr: a spinner on a terminal)."""
        return StatusLine()


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


# A JobSpec field as the user typed it (the launch flags; the magics share them).
_FLAGS = {
    "accelerator": "--gpu",
    "procs_per_node": "--procs",
    "tensor_parallel": "--tp",
    "pipeline_parallel": "--pp",
    "mounts": "--mount",
    "secrets": "--secret",
    "script": "SCRIPT",
}
_FIELD_TEXT = re.compile(r"\bJobSpec\.([a-z_]+)\b")
_FIELD_WORD = re.compile(r"(?<![\"'])\b(accelerator|procs_per_node|tensor_parallel|pipeline_parallel)\b(?![=\"'])")
_FIELD_ASSIGN = re.compile(r"\b(accelerator|nodes|procs_per_node)=['\"]?([\w.-]+)['\"]?")


def flag_of(field: str) -> str:
    """The option a user types for a :class:`JobSpec` field (``procs_per_node`` -> ``--procs``)."""
    return _FLAGS.get(field, "--" + field.replace("_", "-"))


def door_text(error: StarverseError, *, notebook: bool = False) -> str:
    """``str(error)`` in the words of the door in use: flags, not ``JobSpec`` fields; ``%sv`` in a notebook.

    The core names its fields (``JobSpec.nodes``, ``accelerator='cpu'``); a terminal user typed
    ``--nodes`` and ``--gpu cpu``, a notebook user ``%sv launch ... --nodes``.
    """
    text = str(error)
    text = _FIELD_TEXT.sub(lambda m: flag_of(m.group(1)), text)
    text = _FIELD_ASSIGN.sub(lambda m: f"{flag_of(m.group(1))} {m.group(2)}", text)
    text = _FIELD_WORD.sub(lambda m: flag_of(m.group(1)), text)
    if notebook:
        text = text.replace("`starverse ", "`%sv ")
    return text
