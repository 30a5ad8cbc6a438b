"""What the ``%sv`` magics show instead of the terminal's text: widgets in the notebook."""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from ..cli import Presenter
from ..watch import JobWatch

if TYPE_CHECKING:
    from ..catalog import PullProgress
    from ..client import Starverse

__all__ = ["NotebookPresenter"]


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

    def show(self, result: object) -> object:
        if isinstance(result, JobWatch):
            from ..widgets import JobHandle

            return JobHandle.of(result)
        return result
