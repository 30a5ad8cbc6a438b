"""IPython magics ``%sv`` / ``%%sv``: the CLI's command table, run inside the kernel.

``%sv info`` shows what ``starverse info`` prints; ``%sv mount NAME`` returns a path;
``%%sv train ...`` takes the cell body as the training script. Results are returned
as objects (widgets display themselves), never printed and lost.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class

if TYPE_CHECKING:
    from ..client import Starverse

# `%load_ext jupyter_starverse` registers the magics and imports nothing else: the command
# table, the facade and the widgets are imported by the first `%sv` (a test keeps it so).

__all__ = ["StarverseMagics", "strip_comment"]


def strip_comment(line: str) -> str:
    """``line`` without a shell comment: a ``#`` that starts a word outside quotes, and what follows.

    The README's and the notebooks' cells end lines with ``# what it does``, as a shell would
    read them; a ``#`` inside a word (``--env A=b#c``, a URL's fragment) or in quotes stays.
    """
    quote = ""
    escaped = False
    word_start = True  # at the line's start or after whitespace that is no part of a word
    for i, ch in enumerate(line):
        if escaped:  # the character after a backslash is part of a word, whatever it is
            escaped, word_start = False, False
            continue
        if ch == "#" and word_start:
            return line[:i]
        if ch == "\\" and quote != "'":
            escaped = True
        elif quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        word_start = not quote and not escaped and ch.isspace()
    return line


@magics_class
class StarverseMagics(Magics):
    """``%sv COMMAND ...`` and ``%%sv COMMAND ...`` (see ``%sv --help``)."""

    def __init__(self, shell: Any = None) -> None:
        super().__init__(shell)
        self._client: Starverse | None = None

    @property
    def client(self) -> Starverse:
        """The facade of the kernel's environment now (rebuilt when a ``STARVERSE_*`` variable changed)."""
        from .._settings import Settings
        from ..client import Starverse

        settings = Settings.from_env()
        if self._client is None or self._client.settings != settings:
            self._client = Starverse(settings)
        return self._client

    @line_cell_magic
    def sv(self, line: str, cell: str | None = None) -> Any:
        """Run a starverse command in this kernel (``%sv --help`` lists them)."""
        from ..cli import HelpShown, door_text, parse
        from ..errors import StarverseError, missing_dependency
        from ._presenter import NotebookPresenter

        try:
            args = parse(
                shlex.split(strip_comment(line)),
                prog="%sv" if cell is None else "%%sv",
                cell=cell,
                notebook=True,
                presenter=NotebookPresenter(),
            )
        except HelpShown as shown:
            print(shown.text)
            return None
        except StarverseError as e:
            # IPython shows a UsageError as one red line, without a traceback to dig through,
            # and still marks the cell as failed (so "run all" stops here).
            raise UsageError(door_text(e, notebook=True)) from None
        try:
            return args.presenter.show(args.run(self.client, args))
        except StarverseError as e:
            raise UsageError(door_text(e, notebook=True)) from None
        except ModuleNotFoundError as e:
            missing = missing_dependency(e)  # an optional package: its install hint, not a traceback
            if missing is None:
                raise
            raise UsageError(door_text(missing, notebook=True)) from None
