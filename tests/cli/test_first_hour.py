"""Issue 27, the first hour: README's set-up gives the whole workspace; optional parts are one-line hints."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_starverse.cli import build_parser, main
from jupyter_starverse.errors import OPTIONAL_PACKAGES, MissingDependencyError, missing_dependency

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


def _extras() -> dict[str, list[str]]:
    extras: dict[str, list[str]] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    return extras


def _resolved(extra: str, extras: dict[str, list[str]]) -> set[str]:
    """The distribution names an extra brings, its nested ``jupyter_starverse[...]`` extras included."""
    names: set[str] = set()
    for req in extras[extra]:
        nested = re.fullmatch(r"jupyter_starverse\[(.+)\]", req)
        if nested:
            for inner in nested.group(1).split(","):
                names |= _resolved(inner.strip(), extras)
        else:
            names.add(re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0].lower())
    return names


def test_readme_first_command_installs_jupyterlab_and_a_kernel() -> None:
    readme = (ROOT / "README.md").read_text()
    first = re.search(r"```bash\n(.*starverse demo)\n```", readme)
    assert first, "README's first command (the demo) is gone"
    extra = re.search(r'pip install -e "\.\[(\w+)\]"', first.group(1))
    assert extra
    brought = _resolved(extra.group(1), _extras())
    assert {"jupyterlab", "ipykernel", "torch", "tensorboard"} <= brought


def test_ci_runs_the_readme_test_command_word_for_word() -> None:
    readme = (ROOT / "README.md").read_text()
    command = re.search(r"\*\*Run the tests\*\*.*?```bash\n(.*?)\n```", readme, re.S)
    assert command
    ci = (ROOT / ".ci" / "run").read_text()
    between = ci.split("# --- begin README test command ---\n")[1].split("\n# --- end README test command ---")[0]
    assert between == command.group(1)


def test_every_optional_package_maps_to_an_extra_that_brings_it() -> None:
    extras = _extras()
    dist = {"jupyterlab": "jupyterlab", "ipykernel": "ipykernel", "PIL": "pillow"}
    for module, extra in OPTIONAL_PACKAGES.items():
        assert dist.get(module, module) in _resolved(extra, extras), (module, extra)


def test_a_missing_optional_package_deep_in_a_call_is_its_install_hint() -> None:
    try:
        try:
            raise ModuleNotFoundError("No module named 'transformers.models'", name="transformers.models")
        except ModuleNotFoundError as inner:
            raise RuntimeError("while loading") from inner
    except RuntimeError as e:
        found = missing_dependency(e)
    assert isinstance(found, MissingDependencyError)
    assert found.hint == "pip install jupyter_starverse[models]"
    assert missing_dependency(ModuleNotFoundError("x", name="not_ours")) is None


def test_data_scan_without_jieba_is_one_line_with_the_install_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "raw"
    src.mkdir()
    doc = {"text": "客户张伟住在北京市。电话 13800138000"}
    (src / "a.jsonl").write_text(json.dumps(doc, ensure_ascii=False) + "\n")
    assert main(["store", "add", "raw", str(src)]) == 0
    monkeypatch.setitem(sys.modules, "jieba", None)  # `import jieba` now fails as if it were not installed
    monkeypatch.setitem(sys.modules, "jieba.posseg", None)
    capsys.readouterr()
    assert main(["data", "scan", "raw"]) != 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    [line] = [x for x in err.splitlines() if x.startswith("error:")]
    assert "'jieba'" in line and "Chinese names" in line and "pip install jupyter_starverse[data]" in line


def test_any_command_hitting_a_missing_optional_package_prints_the_hint(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from jupyter_starverse.cli import _info

    def boom(client: object, args: object) -> object:
        import onnxruntime.quantization  # noqa: F401 - stands for any optional import deep in a call

        return None

    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    real = _info.register

    def register(sub: object) -> None:
        real(sub)  # type: ignore[arg-type]
        sub.choices["info"].set_defaults(run=boom)  # type: ignore[attr-defined]

    monkeypatch.setattr(_info, "register", register)
    assert main(["info"]) != 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and "pip install jupyter_starverse[export]" in err


def _parsers(parser: argparse.ArgumentParser, path: str = "starverse") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _parsers(child, f"{path} {name}")


def test_no_help_lists_a_hidden_command_and_every_backend_option_names_slurm() -> None:
    backends = 0
    for path, parser in _parsers(build_parser()):
        text = parser.format_help()
        assert "SUPPRESS" not in text, path
        for action in parser._actions:
            if "--backend" in action.option_strings:
                backends += 1
                assert "slurm" in (action.help or "") + str(action.choices or ""), path
                assert "slurm" in (action.help or ""), f"{path} --backend help omits slurm"
    assert backends >= 4  # launch, jobs ls/show/..., pipeline run, serve


def test_jobs_alone_lists_the_jobs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["jobs"]) == 0
    assert capsys.readouterr().out.startswith("no jobs")


def test_ctrl_c_on_logs_follow_says_the_job_keeps_running(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from jupyter_starverse.client import Starverse

    class Backend:
        def logs(self, job_id: str, *, follow: bool, rank: int | None) -> Iterator[object]:
            raise KeyboardInterrupt  # the user pressed Ctrl-C while the log was followed
            yield

    monkeypatch.setattr(Starverse, "backend", lambda self, name=None, **kw: Backend())
    assert main(["jobs", "logs", "-f", "job-123", "--backend", "slurm"]) == 130
    err = capsys.readouterr().err
    assert "job job-123 keeps running" in err
    assert "starverse jobs cancel job-123 --backend slurm" in err and "jobs logs -f job-123" in err


def test_typos_get_did_you_mean_at_every_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "raw"
    src.mkdir()
    (src / "a.txt").write_text("hello\n")
    assert main(["store", "add", "mycorpus", str(src)]) == 0
    capsys.readouterr()
    cases = {
        ("store", "pull", "mycorpsu"): "did you mean 'mycorpus'?",
        ("store", "mount", "mycorpus@2"): "did you mean 'mycorpus@1'?",
        ("recipes", "show", "spt"): "did you mean 'sft'?",
        ("cost", "estimate", "--gpu", "rtx5090", "--cards", "2", "--hours", "1"): "did you mean 'rtx4090'?",
        ("launch", "x.py", "--gpu", "rtx5090", "--dry-run"): "unknown GPU type 'rtx5090' (did you mean 'rtx4090'?",
    }
    for argv, expected in cases.items():
        assert main(list(argv)) != 0, argv
        err = capsys.readouterr().err
        assert expected in err, (argv, err)
        assert "known types: a100-40g" in err or "GPU" not in expected, err
        assert "pull" not in argv or "..." not in err  # no progress line drawn before the refusal


def test_errors_name_the_flag_the_user_typed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["launch", "x.py", "--nodes", "0", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "--nodes" in err and "JobSpec" not in err
    assert main(["launch", "x.py", "--nodes", "2", "--template", "tp", "--tp", "3", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "--tp" in err and "tensor_parallel" not in err


def test_a_notebook_hint_names_the_magic(ip: Any, tmp_path: Path) -> None:
    from IPython.core.error import UsageError

    with pytest.raises(UsageError) as refused:
        ip.run_line_magic("sv", "store pull mycorpsu")
    assert "`%sv store ls`" in str(refused.value) and "`starverse " not in str(refused.value)
    with pytest.raises(UsageError) as refused:
        ip.run_line_magic("sv", "launch x.py --gpu rtx5090 --dry-run")
    assert "known types" in str(refused.value)


def test_a_bad_store_path_is_an_error_with_a_hint_never_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "raw"
    src.mkdir()
    (src / "a.txt").write_text("hello\n")
    a_file = tmp_path / "store-file"
    a_file.write_text("not a folder")
    for store, expected in ((a_file, "is a file, not a folder"), (Path("/proc/no-store-here"), "cannot create")):
        monkeypatch.setenv("STARVERSE_STORE", str(store))
        assert main(["store", "add", "corpus", str(src)]) != 0
        err = capsys.readouterr().err
        assert "Traceback" not in err and expected in err and "STARVERSE_STORE" in err, err
        assert "STARVERSE_SHARED_GROUP" not in err


def test_a_read_only_store_of_ones_own_gets_no_group_hint(tmp_path: Path) -> None:
    import errno

    from jupyter_starverse.catalog._perms import denied

    mine = denied(PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "x")), "add corpus")
    assert "chmod u+w" in str(mine) and "STARVERSE_SHARED_GROUP" not in str(mine)
    ro = denied(OSError(errno.EROFS, "Read-only file system", str(tmp_path)), "add corpus")
    assert "read-only" in str(ro) and "STARVERSE_SHARED_GROUP" not in str(ro)


def test_help_alone_is_the_full_parsers_help_without_importing_the_commands() -> None:
    assert build_parser(summary=True).format_help() == build_parser().format_help()  # keep _SUMMARIES in step
    assert build_parser("%sv", summary=True).format_help() == build_parser("%sv").format_help()
    code = (
        "import sys; from jupyter_starverse.cli import main; main(['--help']); "
        "print(sorted(m for m in sys.modules if m.startswith('jupyter_starverse.cli._') and m != "
        "'jupyter_starverse.cli._common'), 'jupyter_starverse.client' in sys.modules, file=sys.stderr)"
    )
    import subprocess

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "[] False"  # no command module, not even the facade
    assert "Slurm" in done.stdout


def test_followed_logs_in_a_notebook_have_readable_text_plain(monkeypatch: pytest.MonkeyPatch) -> None:
    import IPython.display

    from jupyter_starverse.widgets import logview

    shown: list[dict[str, str]] = []

    class Handle:
        def update(self, bundle: dict[str, str], raw: bool) -> None:
            shown.append(bundle)

    def display(bundle: dict[str, str], raw: bool = False, display_id: bool = False) -> Handle:
        shown.append(bundle)
        return Handle()

    monkeypatch.setattr(IPython.display, "display", display)
    monkeypatch.setattr(logview, "_has_frontend", lambda: True)
    logview.LogView(iter(["[0] step 1 loss 3.2", "[1] step 1 loss 3.1"]))._ipython_display_()
    assert shown[-1]["text/plain"] == "[0] step 1 loss 3.2\n[1] step 1 loss 3.1"  # not a widget's repr
    assert "loss 3.1" in shown[-1]["text/html"]
    assert all(set(b) == {"text/plain", "text/html"} for b in shown)


def test_export_lets_no_third_party_warning_reach_the_user() -> None:
    import logging
    import warnings

    from jupyter_starverse.export._onnx import quietly
    from jupyter_starverse.export._service import ExportService

    assert getattr(ExportService.export, "__wrapped__", None) is not None  # the service's export is quiet

    @quietly
    def export_like() -> None:
        warnings.warn_explicit("`torch_dtype` is deprecated", FutureWarning, "modeling_utils.py", 1, "transformers.x")
        warnings.warn_explicit("ours", UserWarning, "_service.py", 1, "jupyter_starverse.export._service")
        logging.getLogger("transformers.modeling_utils").warning("advice nobody asked for")

    before = logging.getLogger("transformers").level  # WARNING once transformers is imported, else NOTSET
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        export_like()
    assert [str(w.message) for w in seen] == ["ours"]
    assert logging.getLogger("transformers").level == before  # restored after the export


def test_a_data_steps_took_is_the_time_the_user_waited(
    client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time as _time

    from jupyter_starverse.data import DataPrep
    from jupyter_starverse.data._html import took_text

    src = tmp_path / "raw"
    src.mkdir()
    (src / "a.jsonl").write_text(json.dumps({"text": "call 13800138000"}) + "\n")
    client.catalog.add_dataset("raw", str(src))
    real = DataPrep._estimate

    def slow_estimate(self: Any, *args: Any, **kwargs: Any) -> Any:
        _time.sleep(0.3)  # stands for a dictionary loaded once (jieba's: ~12 s on a first scan)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(DataPrep, "_estimate", slow_estimate)
    report = client.data.scan("raw")
    assert report.elapsed_s >= 0.3  # the fixed cost is in "took", not left out
    assert took_text(0.42) == "0.42 s" and took_text(75) == "1m15s"  # never "took 0s"
