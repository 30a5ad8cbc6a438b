"""Server configuration for the UI tests (galata): a throw-away root, no auth prompts, no news."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from jupyterlab.galata import configure_jupyter_server

c = get_config()  # type: ignore[name-defined]  # noqa: F821 - provided by traitlets
configure_jupyter_server(c)

root = Path(os.environ.get("STARVERSE_UI_ROOT") or tempfile.mkdtemp(prefix="starverse-ui-"))
root.mkdir(parents=True, exist_ok=True)
os.environ.setdefault("STARVERSE_HOME", str(root / "starverse-home"))
os.environ.setdefault("STARVERSE_MODE", "cpu")
os.environ.setdefault("STARVERSE_LOCAL_GPU", "yes")  # the mode spec switches to GPU: play a GPU machine

c.ServerApp.root_dir = str(root)
c.ServerApp.allow_root = True
c.ServerApp.ip = "127.0.0.1"
c.LabApp.news_url = None
c.LabApp.check_for_updates_class = "jupyterlab.NeverCheckForUpdate"
