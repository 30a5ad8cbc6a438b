"""No module grows past what one can read in a sitting (notes/CONVENTIONS.md, "Size").

A module over :data:`LIMIT` lines is split by responsibility, each part with a docstring saying
what it owns. :data:`ALLOWED` names the modules let over the limit for now, each with the reason;
it starts empty, and a module that shrinks below the limit must leave it (the test says so).
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 500
#: ``path relative to the repository -> why it may be longer`` (keep it empty).
ALLOWED: dict[str, str] = {}


def _sources() -> list[Path]:
    python = [p for p in (ROOT / "jupyter_starverse").rglob("*.py") if "labextension" not in p.parts]
    src = ROOT / "labextension" / "src"
    typescript = [p for ext in ("*.ts", "*.tsx") for p in src.rglob(ext) if "node_modules" not in p.parts]
    return sorted(python + typescript)


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_module_is_over_the_size_limit() -> None:
    over = {str(p.relative_to(ROOT)): _lines(p) for p in _sources() if _lines(p) > LIMIT}
    new = {path: n for path, n in over.items() if path not in ALLOWED}
    assert new == {}, f"modules over {LIMIT} lines; split them by responsibility (notes/CONVENTIONS.md): {new}"


def test_the_allow_list_holds_only_modules_still_over_the_limit() -> None:
    shrunk = [path for path in ALLOWED if not (ROOT / path).is_file() or _lines(ROOT / path) <= LIMIT]
    assert shrunk == [], f"remove from ALLOWED in tests/test_sizes.py: {shrunk}"


def test_the_check_sees_both_languages() -> None:
    names = {p.suffix for p in _sources()}
    assert {".py", ".ts", ".tsx"} <= names
    assert any(p.name == "client.py" for p in _sources())
