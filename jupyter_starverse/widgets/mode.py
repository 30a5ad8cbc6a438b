"""GPU/CPU toggle for notebooks (plain ipywidgets, so it works in VS Code too).

``ModeToggle(client)`` shows the current mode and its price per hour; choosing the other
mode previews the switch (price difference, warnings) and the *Switch* button makes it,
keeping the kernel's variables (see :func:`jupyter_starverse.modes.switch_here`).
Errors are shown in the widget, never swallowed.
"""

from __future__ import annotations

import html
from collections.abc import Callable, MutableMapping
from typing import TYPE_CHECKING, Any

import ipywidgets as W

from jupyter_starverse._format import format_price_per_hour
from jupyter_starverse.errors import StarverseError
from jupyter_starverse.modes import SwitchPlan, SwitchResult

if TYPE_CHECKING:
    from jupyter_starverse.client import Starverse

__all__ = ["ModeToggle"]


def _user_namespace() -> MutableMapping[str, Any]:
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise StarverseError("the mode toggle switches a notebook kernel", hint="display it in a notebook")
    ns: MutableMapping[str, Any] = shell.user_ns
    return ns


class ModeToggle(W.VBox):  # type: ignore[misc]
    """Switch the workspace between CPU and GPU from a notebook.

    Parameters
    ----------
    client
        The facade (``Starverse()``).
    namespace
        Variables to keep across the switch (default: the kernel's user namespace).
    """

    def __init__(self, client: Starverse, *, namespace: MutableMapping[str, Any] | None = None) -> None:
        self.client = client
        self._namespace = namespace
        status = client.modes.status()
        mode = status.mode
        self.current = W.HTML()
        self.kind = W.ToggleButtons(options=[("CPU", "cpu"), ("GPU", "gpu")], value=mode.kind)
        gpu_type = mode.gpu_type or client.settings.gpu_type
        options = list(status.gpu_types) if gpu_type in status.gpu_types else [*status.gpu_types, gpu_type]
        self.gpu_type = W.Dropdown(options=options, value=gpu_type, description="GPU")
        self.gpus = W.BoundedIntText(value=max(mode.gpus, 1), min=1, max=64, description="cards")
        self.preview = W.HTML()
        self.switch_button = W.Button(description="Switch", icon="exchange", disabled=True)
        self.result = W.HTML()
        self.error = W.HTML()
        self.plan: SwitchPlan | None = None
        self.last: SwitchResult | None = None
        for w in (self.kind, self.gpu_type, self.gpus):
            w.observe(self._on_change, names=["value"])
        self.switch_button.on_click(lambda _b: self.switch())
        super().__init__(
            [
                self.current,
                W.HBox([self.kind, self.gpu_type, self.gpus]),
                self.preview,
                self.switch_button,
                self.result,
                self.error,
            ]
        )
        self._show_current()
        self._on_change(None)

    def __repr__(self) -> str:
        # what a front end without widgets (a terminal IPython) shows instead of the toggle
        return f"GPU/CPU mode toggle (now {self.client.modes.current()}; open the notebook in JupyterLab or VS Code)"

    def _show_current(self) -> None:
        status = self.client.modes.status()
        price = format_price_per_hour(status.price_per_hour, status.currency)
        self.current.value = f"<b>Mode:</b> {html.escape(str(status.mode))} · {html.escape(price)}"

    def _guard(self, fn: Callable[[], object]) -> None:
        self.error.value = ""
        try:
            fn()
        except StarverseError as e:
            text = html.escape(str(e))
            self.error.value = f"<span style='color:var(--jp-error-color1,#c00)'>{text}</span>"

    def _args(self) -> dict[str, Any]:
        if self.kind.value == "cpu":
            return {"kind": "cpu"}
        return {"kind": "gpu", "gpu_type": self.gpu_type.value, "gpus": int(self.gpus.value)}

    def _on_change(self, _change: dict[str, Any] | None) -> None:
        gpu = self.kind.value == "gpu"
        self.gpu_type.disabled = not gpu
        self.gpus.disabled = not gpu
        self.plan = None
        self.switch_button.disabled = True
        self.preview.value = ""

        def plan() -> None:
            p = self.client.modes.plan(**self._args())
            self.plan = p
            if not p.changes:
                self.preview.value = "this is the current mode"
                return
            warnings = "".join(f"<br>warning: {html.escape(w)}" for w in p.warnings)
            self.preview.value = f"switch to {html.escape(str(p.target))}: {html.escape(str(p.price))}{warnings}"
            self.switch_button.disabled = False

        self._guard(plan)

    def switch(self) -> SwitchResult | None:
        """Make the previewed switch; returns the result (also shown in the widget)."""
        from jupyter_starverse.modes import switch_here

        def run() -> None:
            namespace = self._namespace if self._namespace is not None else _user_namespace()
            self.last = switch_here(self.client.modes, namespace, **self._args())
            self.result.value = f"<pre>{html.escape(str(self.last))}</pre>"

        self.last = None
        self._guard(run)
        self._show_current()
        self._on_change(None)
        return self.last
