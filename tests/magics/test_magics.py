from __future__ import annotations

from typing import Any

import pytest
from IPython.core.error import UsageError

from jupyter_starverse import __version__
from jupyter_starverse.client import Info


def test_sv_info_returns_the_same_info(ip: Any) -> None:
    info = ip.run_line_magic("sv", "info")
    assert isinstance(info, Info)
    assert info.version == __version__
    assert info.mode == "cpu"


def test_sv_info_displays_as_a_table(ip: Any) -> None:
    from IPython.lib.pretty import pretty

    text = pretty(ip.run_line_magic("sv", "info"))
    assert "store" in text and __version__ in text


def test_sv_help_lists_commands(ip: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert ip.run_line_magic("sv", "--help") is None
    assert "info" in capsys.readouterr().out


def test_sv_bad_command_is_one_clear_error(ip: Any) -> None:
    with pytest.raises(UsageError, match="invalid choice"):
        ip.run_line_magic("sv", "nonsense")


def test_load_ext_registers_the_magics_and_imports_nothing_heavy_until_a_magic_runs() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from IPython.testing.globalipapp import start_ipython; ip = start_ipython(); "
        "ip.run_line_magic('load_ext', 'jupyter_starverse'); "
        "heavy = ('ipywidgets', 'torch', 'jupyter_starverse.client', 'jupyter_starverse.cli', "
        "'jupyter_starverse.widgets'); "
        "print(sorted(m for m in heavy if m in sys.modules)); "
        "ip.run_line_magic('sv', '--help'); "
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0] == "[]", lines  # %load_ext: the magics only, nothing of the command table, facade or widgets
    assert "COMMAND" in done.stdout and lines[-1] == "['jupyter_starverse.cli']", lines  # %sv --help: the table
