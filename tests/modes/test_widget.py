"""The GPU/CPU toggle widget: preview with the price difference, switch, errors shown."""

from __future__ import annotations

import io

from jupyter_starverse._settings import Settings
from jupyter_starverse.catalog import Catalog
from jupyter_starverse.catalog._progress import ProgressTracker
from jupyter_starverse.client import Starverse
from jupyter_starverse.modes import Mode
from jupyter_starverse.modes._kernelstate import list_states
from jupyter_starverse.widgets.mode import ModeToggle


def test_toggle_previews_and_switches(settings: Settings) -> None:
    ns: dict[str, object] = {"x": 42, "fh": io.StringIO("log")}
    client = Starverse(settings)
    toggle = ModeToggle(client, namespace=ns)
    assert "gpu (1 x a100-80g)" in toggle.current.value and "6.50 CNY/h" in toggle.current.value
    assert toggle.switch_button.disabled and "current mode" in toggle.preview.value

    toggle.kind.value = "cpu"
    assert toggle.gpu_type.disabled and not toggle.switch_button.disabled
    assert "-6.40 CNY/h" in toggle.preview.value
    result = toggle.switch()
    assert result is not None and client.modes.current() == Mode("cpu")
    assert "saved 1 name(s): x" in toggle.result.value and "fh: open file handle" in toggle.result.value
    assert "cpu" in toggle.current.value and "0.10 CNY/h" in toggle.current.value
    assert [s.names for s in list_states(settings.home)] == [("x",)]  # waits on disk for the restore

    toggle.kind.value = "gpu"
    toggle.gpu_type.value = "h100-80g"
    toggle.gpus.value = 2
    assert "+23.90 CNY/h" in toggle.preview.value


def test_toggle_shows_errors_and_changes_nothing(settings: Settings) -> None:
    tracker = ProgressTracker("ds/big@1", Catalog(settings).layout.progress_path("ds.big@1"), None)
    tracker.start(bytes_total=10, files_total=1)
    client = Starverse(settings)
    toggle = ModeToggle(client, namespace={"x": 1})
    toggle.kind.value = "cpu"
    assert "a pull is running: ds/big@1" in toggle.error.value
    assert toggle.switch_button.disabled
    assert toggle.switch() is None  # clicking anyway: the same clear error, nothing switched
    assert "a pull is running" in toggle.error.value
    assert client.modes.current() == Mode("gpu", "a100-80g", 1)
    assert list_states(settings.home) == []
