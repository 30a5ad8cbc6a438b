from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_starverse import __version__
from jupyter_starverse.cli import main


def _starverse(*argv: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "starverse"
    return subprocess.run([str(exe), *argv], capture_output=True, text=True, env=os.environ.copy(), timeout=120)


def test_console_script_info_json(tmp_path: Path) -> None:
    done = _starverse("info", "--json")
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["version"] == __version__
    assert info["store"] == str(tmp_path / "sv-home" / "store")
    assert info["mode"] == "cpu"


def test_info_text_is_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["version", __version__]
    assert "currency" in out


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert __version__ in capsys.readouterr().out
    assert main(["--help"]) == 0
    assert "info" in capsys.readouterr().out


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["frobnicate"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice" in err and "usage:" in err


def test_bad_environment_is_reported_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("STARVERSE_BACKEND", "nope")
    assert main(["info"]) == 2
    assert "STARVERSE_BACKEND" in capsys.readouterr().err


def test_double_dash_ends_options_anywhere() -> None:
    from jupyter_starverse.cli import parse
    from jupyter_starverse.cli._common import UsageError

    args = parse(["launch", "train.py", "--nodes", "2", "--", "--foo", "1"])
    assert (args.script, args.script_args, args.nodes) == ("train.py", ["--foo", "1"], 2)
    args = parse(["train", "--steps", "5", "--", "--lr", "0.1", "--nodes", "9"], cell="x", notebook=True)
    assert args.script_args == ["--lr", "0.1", "--nodes", "9"] and args.nodes == 1
    with pytest.raises(UsageError, match="takes no script arguments"):
        parse(["info", "--", "x"])


def test_the_command_table_names_every_module_and_command() -> None:
    import importlib

    from jupyter_starverse.cli import _COMMANDS, _GROUPS, CommandParser

    registered = {}
    for group in _GROUPS:
        parser = CommandParser(prog="starverse")
        sub = parser.add_subparsers(dest="command", parser_class=CommandParser)
        importlib.import_module(f"jupyter_starverse.cli.{group}").register(sub)
        registered.update(dict.fromkeys(sub.choices, group))
    assert registered == _COMMANDS, "a command line loads only its command's module: list new commands in _COMMANDS"
