"""The lab and the web app use qkviz's public names: every module of qkviz that a bench or the app imports is qkviz
itself or one of its packages (a folder with ``__init__.py``), never a module inside one. import-linter forbids the
modules two packages deep (``qkviz.*.*.*``); this test covers those one package deep, such as ``qkviz.store.run``,
which a wildcard cannot tell from a subpackage."""

from __future__ import annotations

import ast
from pathlib import Path

from support import REPO


def imported_qkviz_modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name == "qkviz" or name.startswith("qkviz.")}


def is_package(module: str) -> bool:
    return (REPO / Path(*module.split(".")) / "__init__.py").exists()


def test_a_module_inside_a_package_is_told_from_the_package():
    assert is_package("qkviz.extraction.gate") and not is_package("qkviz.store.run")
    source = REPO / "bench" / "extract.py"
    assert imported_qkviz_modules(source), "the parser finds the bench's qkviz imports"


def test_the_benches_and_the_app_import_only_packages_of_qkviz():
    sources = [*sorted((REPO / "bench").rglob("*.py")), *sorted((REPO / "dash_app").rglob("*.py"))]
    inside = [f"{path.relative_to(REPO)}: {module}" for path in sources for module in sorted(imported_qkviz_modules(path))
              if module not in ("qkviz", "qkviz.cli") and not is_package(module)]
    assert inside == [], "a module inside a package of qkviz; import the package's own name instead:\n" + "\n".join(inside)
