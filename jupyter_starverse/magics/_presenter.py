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
    """Teach IPython to show ``result``'s type by its own text when IPython would print a ``repr``.

    Every command result defines ``_repr_pretty_``/``_repr_html_``; this is the safety net for a
    result type that has a readable ``__str__`` but only a dataclass ``repr``, and for one whose
    ``_repr_pretty_`` is inherited (``ShownAsText``) below a dataclass's own ``__repr__``: IPython
    takes the first of the two it meets along the class's MRO, so that ``repr`` would win.
    """
    cls = type(result)
    if hasattr(cls, "_ipython_display_") or not cls.__module__.startswith("jupyter_starverse."):
        return
    for klass in cls.__mro__:
        if "_repr_pretty_" in klass.__dict__:
            return  # IPython calls it: the type's own display
        if klass is not object and "__repr__" in klass.__dict__:
            break  # IPython would print this repr
    inherited = getattr(cls, "_repr_pretty_", None)
    if inherited is None and cls.__str__ is object.__str__:
        return
    from IPython import get_ipython

    shell = get_ipython()  # type: ignore[no-untyped-call]
    if shell is None:
        return
    from .._format import pretty_text

    def as_text(obj: Any, p: Any, cycle: bool) -> None:
        if inherited is not None:
            obj._repr_pretty_(p, cycle)
        else:
            pretty_text(p, str(obj))

    shell.display_formatter.formatters["text/plain"].for_type(cls, as_text)


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
