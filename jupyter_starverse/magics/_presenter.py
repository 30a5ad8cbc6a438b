"""What the ``%sv`` magics show instead of the terminal's text: widgets in the notebook."""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from typing import TYPE_CHECKING, Any

from ..cli import Presenter

if TYPE_CHECKING:
    from ..catalog import PullProgress
    from ..client import Starverse

__all__ = ["Message", "NotebookPresenter"]


class Message(str):
    """A command's message (``discarded saved state X``): shown as text, not as a quoted string."""

    __slots__ = ()

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        from .._format import pretty_text

        pretty_text(p, str(self))


def _plain_text_for(result: object) -> None:
    """Teach IPython to show ``result``'s type by its ``__str__`` when it has no display of its own.

    Every command result defines ``_repr_pretty_``/``_repr_html_``; this is the safety net for a
    result type that has a readable ``__str__`` but only a dataclass ``repr``.
    """
    cls = type(result)
    if hasattr(cls, "_repr_pretty_") or hasattr(cls, "_ipython_display_") or cls.__str__ is object.__str__:
        return
    if not cls.__module__.startswith("jupyter_starverse."):
        return
    from IPython import get_ipython

    shell = get_ipython()  # type: ignore[no-untyped-call]
    if shell is None:
        return
    from .._format import pretty_text

    shell.display_formatter.formatters["text/plain"].for_type(cls, lambda obj, p, cycle: pretty_text(p, str(obj)))


class NotebookPresenter(Presenter):
    """Progress as a widget bar, jobs as their live monitor, the kernel's own variables."""

    notebook = True

    def progress(self, label: str) -> tuple[Callable[[PullProgress], None], Callable[[], None]]:
        from ..widgets.catalog import progress_bar

        return progress_bar(label)

    def namespace(self) -> MutableMapping[str, Any]:
        from IPython import get_ipython

        shell = get_ipython()  # type: ignore[no-untyped-call]
        if shell is None:
            return super().namespace()
        user_ns: MutableMapping[str, Any] = shell.user_ns
        return user_ns

    def mode_toggle(self, client: Starverse) -> object:
        from ..widgets.mode import ModeToggle

        return ModeToggle(client)

    def chat(
        self, client: Starverse, model: str, *, feedback: str | None, endpoint: bool = False, token: str | None = None
    ) -> object:
        from ..widgets.chat import ChatWidget

        if endpoint:
            return ChatWidget(client, endpoint=model, token=token, feedback=feedback or "chat")
        return ChatWidget(client, model=model, feedback=feedback or "chat")

    def show(self, result: object) -> object:
        from ..watch import JobWatch

        if isinstance(result, JobWatch):
            from ..widgets import JobHandle

            return JobHandle.of(result)
        if isinstance(result, Iterator):  # log lines, demo events: one scrollable block, appended live
            from ..widgets.logview import LogView

            return LogView(result)
        if isinstance(result, str) and not isinstance(result, Message):
            return Message(result)
        _plain_text_for(result)
        return result
