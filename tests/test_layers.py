"""The floors of the package hold: no arrow runs up, no circle, front doors use public names.

``lint-imports`` (import-linter) checks the contracts in pyproject.toml over every import,
function-level ones included. This file runs it, checks that every package is placed on a
floor, and adds what import-linter does not check: circles between modules *inside* a
package (lazy and type-only imports included) and private-module imports by the front doors.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11; the contract itself runs everywhere

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "jupyter_starverse"
FRONT_DOORS = ("cli", "server", "widgets", "magics", "_api")


def _config() -> dict[str, object]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    config: dict[str, object] = data["tool"]["importlinter"]
    return config


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if "labextension" in rel.parts or "node_modules" in rel.parts:
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(module: str, path: Path) -> Iterator[tuple[str, int]]:
    """``(imported module or package, line)`` of every import in ``path``: function-level ones and
    those under ``if TYPE_CHECKING:`` included (a type-only import is still a dependency: move the
    shared type one module down instead)."""
    tree = ast.parse(path.read_text())
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for alias in node.names:
                yield f"{target}.{alias.name}", node.lineno


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """The project module ``name`` refers to (``pkg.func`` -> ``pkg``), None for third-party names."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def test_import_linter_contracts_hold() -> None:
    done = subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), "--no-cache"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "broken" in done.stdout and "0 broken" in done.stdout


def test_every_package_stands_on_a_floor() -> None:
    [layers] = [c for c in _config()["contracts"] if c["type"] == "layers"]  # type: ignore[attr-defined]
    placed = {name.strip() for layer in layers["layers"] for name in layer.replace(":", "|").split("|")}
    top = {".".join(m.split(".")[:2]) for m in _modules() if m.count(".") >= 1}
    top -= {"jupyter_starverse.__main__"}
    assert sorted(top - placed) == [], "add these to a floor in [tool.importlinter] of pyproject.toml"


def test_no_circle_between_modules_lazy_and_type_only_imports_included() -> None:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = set()
        for name, _ in _imports(module, path):
            target = _known(name, modules)
            if target is None or target == module:
                continue
            # importing a.b.c runs a.b and a first, unless we are inside them already
            parts = target.split(".")
            for i in range(2, len(parts) + 1):
                step = ".".join(parts[:i])
                if step != module and not (module.startswith(step + ".") and step != target):
                    targets.add(step)
        graph[module] = targets
    cycles = _strongly_connected(graph)
    assert cycles == [], f"import circles (function-level and TYPE_CHECKING imports count): {cycles}"


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


@pytest.mark.parametrize("door", FRONT_DOORS)
def test_front_doors_use_only_the_facade_and_public_names(door: str) -> None:
    modules = _modules()
    bad = []
    for module, path in modules.items():
        if module.count(".") == 0 or module.split(".")[1] != door:
            continue
        for name, line in _imports(module, path):
            target = _known(name, modules)
            if target is None:
                continue
            parts = target.split(".")
            if len(parts) < 3 or parts[1] == door:
                continue  # a base module (_settings, errors) or the door's own code
            if any(p.startswith("_") for p in parts[2:]):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert bad == [], "front doors import private core modules; export the name from the package:\n" + "\n".join(bad)


def test_using_the_core_and_the_cli_loads_no_widget_ipython_or_web_server_code() -> None:
    probe = (
        "import sys\n"
        "from jupyter_starverse.client import Starverse\n"
        "from jupyter_starverse.cli import build_parser\n"
        "import jupyter_starverse.backends.local, jupyter_starverse.backends.kubernetes, jupyter_starverse.watch\n"
        "build_parser()\n"
        "doors = ('jupyter_starverse.widgets', 'jupyter_starverse.server', 'jupyter_starverse.magics')\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('IPython', 'ipywidgets', 'tornado')\n"
        "             or m.startswith(doors))\n"
        "print(bad)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_checks_catch_what_they_claim() -> None:
    # a lazy circle, written the way the old launch/_api circle was, is found
    graph = {"a.x": {"a.y"}, "a.y": {"a.x"}, "a.z": set()}
    assert _strongly_connected(graph) == [["a.x", "a.y"]]
    tree_src = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from jupyter_starverse.client import Starverse\n"
        "def f():\n    from jupyter_starverse.widgets import JobHandle\n"
    )
    path = ROOT / "build" / "layer_probe.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(tree_src)
    try:
        found = [f for f in _imports("jupyter_starverse.probe", path) if f[0].startswith("jupyter_starverse")]
    finally:
        path.unlink()
    assert sorted(found) == [("jupyter_starverse.client.Starverse", 3), ("jupyter_starverse.widgets.JobHandle", 5)]
