"""Every ``--help`` builds its parser without importing what the command itself needs.

``starverse GROUP --help`` must cost no more than a real command (``jobs ls``): its parser is
built from the command module alone, which imports the facade, the services and any heavy
package (torch, transformers, kubernetes, widgets) only inside the functions that run.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from jupyter_starverse.cli import _SUMMARIES

HEAVY = ("torch", "transformers", "kubernetes", "ipywidgets", "IPython", "huggingface_hub", "numpy", "tornado")
# The core a parser may need: the floor (jobmodel: the launch flags' choices), the base, the CLI.
LIGHT_CORE = ("jupyter_starverse.cli", "jupyter_starverse.jobmodel", "jupyter_starverse.errors",
              "jupyter_starverse._inputs", "jupyter_starverse._json")  # fmt: skip

_PROBE = (
    "import sys; from jupyter_starverse.cli import main; code = main(sys.argv[1:]); "
    f"mods = [m for m in sys.modules if m.split('.')[0] in {set(HEAVY)!r} or (m.startswith('jupyter_starverse.') "
    f"and not m.startswith({LIGHT_CORE!r}))]; print('LOADED', sorted(mods), code, file=sys.stderr)"
)


@pytest.mark.parametrize("argv", [["--help"], *([name, "--help"] for name in sorted(_SUMMARIES))], ids=" ".join)
def test_help_imports_no_facade_service_or_heavy_package(argv: list[str]) -> None:
    done = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout  # the help itself, in full
    loaded = done.stderr.strip().splitlines()[-1]
    assert loaded == "LOADED [] 0", f"`starverse {' '.join(argv)}` imported modules it does not need: {loaded}"


def test_the_choices_a_parser_offers_are_the_services_own() -> None:
    from jupyter_starverse import _settings, data, evals, export, feedback, pipelines
    from jupyter_starverse.cli import _names

    assert _names.BACKENDS == _settings.BACKENDS
    assert _names.KUBE_KINDS == _settings.KUBE_KINDS
    assert _names.PII_TYPES == data.PII_TYPES
    assert _names.PII_ACTIONS == data.ACTIONS
    assert _names.DATA_STEPS == data.STEPS
    assert _names.EVAL_TASKS == evals.TASKS
    assert _names.EXPORT_FORMATS == tuple(export.FORMATS)
    assert _names.EXPORT_GPU_FORMATS == export.GPU_FORMATS
    assert _names.FEEDBACK_EXPORT_KINDS == feedback.EXPORT_KINDS
    assert _names.PIPELINE_EXPORT_FORMATS == pipelines.EXPORT_FORMATS


def test_a_choice_from_the_names_table_still_refuses_a_wrong_value(capsys: pytest.CaptureFixture[str]) -> None:
    from jupyter_starverse.cli import main

    assert main(["eval", "m", "--data", "d", "--task", "poetry"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'poetry'" in err and "classification" in err and "Traceback" not in err
