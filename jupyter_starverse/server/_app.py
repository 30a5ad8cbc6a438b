"""``StarverseApp``: the jupyter-server ExtensionApp, configurable as ``c.StarverseApp.*``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jupyter_server.extension.application import ExtensionApp
from traitlets import Enum, Unicode

from .._settings import BACKENDS, Settings
from ..client import Starverse
from ._routes import make_handlers

__all__ = ["StarverseApp"]


class StarverseApp(ExtensionApp):
    """Serves ``/jupyter-starverse/*``. Traits left empty fall back to ``STARVERSE_*`` variables."""

    name = "jupyter_starverse"
    load_other_extensions = True

    store = Unicode("", config=True, help="Shared store (fsspec URL or path). Default: $STARVERSE_STORE.")
    experiments = Unicode("", config=True, help="Experiments root. Default: $STARVERSE_EXPERIMENTS.")
    backend = Enum(
        ["", *BACKENDS], default_value="", config=True, help="Default launch backend. Default: $STARVERSE_BACKEND."
    )
    prices_file = Unicode(
        "", config=True, help="Price table (JSON) replacing the shipped one. Default: $STARVERSE_PRICES."
    )
    currency = Unicode(
        "", config=True, help="Currency shown, overriding the price table's. Default: $STARVERSE_CURRENCY."
    )
    namespace = Unicode("", config=True, help="Kubernetes namespace. Default: $STARVERSE_NAMESPACE.")

    def settings_from_config(self) -> Settings:
        """Settings from the environment, overridden by every trait the operator set."""
        settings = Settings.from_env()
        changes: dict[str, Any] = {}
        if self.store:
            changes["store"] = self.store if "://" in self.store else str(Path(self.store).expanduser().absolute())
        if self.experiments:
            changes["experiments"] = Path(self.experiments).expanduser().absolute()
        if self.backend:
            changes["backend"] = self.backend
        if self.prices_file:
            changes["prices_file"] = Path(self.prices_file).expanduser().absolute()
        if self.currency:
            changes["currency"] = self.currency.upper()
        if self.namespace:
            changes["namespace"] = self.namespace
        return settings.replace(**changes) if changes else settings

    def initialize_settings(self) -> None:
        client = Starverse(self.settings_from_config())
        self.settings.update({"starverse_client": client})
        self.log.info("jupyter_starverse: store=%s backend=%s", client.settings.store, client.settings.backend)

    def initialize_handlers(self) -> None:
        self.handlers.extend(make_handlers())

    async def stop_extension(self) -> None:
        client = self.settings.get("starverse_client")
        close = getattr(client, "close", None)
        if callable(close):
            close()
