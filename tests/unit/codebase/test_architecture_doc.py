"""docs/architecture.md names every package of qkviz and of the web app, and no folder of qkviz/ holds more than
:data:`MOST_MODULES` modules: a package that grows past it is cut into subpackages by concept, and the page says
what each one holds."""

from __future__ import annotations

from pathlib import Path

from support import REPO

PAGE = REPO / "docs" / "architecture.md"
MOST_MODULES = 15


def packages(root: str) -> list[Path]:
    return sorted(path.parent for path in (REPO / root).rglob("__init__.py") if "__pycache__" not in path.parts)


def named(package: Path, page: str) -> bool:
    """The page names ``package`` by its dotted name, or by its folder within its parent (``views/``)."""
    dotted = ".".join(package.relative_to(REPO).parts)
    return f"`{dotted}`" in page or f"`{package.name}/" in page or f"`{dotted}." in page


def test_every_package_is_named_on_the_architecture_page():
    page = PAGE.read_text(encoding="utf-8")
    missing = [".".join(p.relative_to(REPO).parts) for p in packages("qkviz") + packages("dash_app") if not named(p, page)]
    assert missing == [], f"docs/architecture.md does not name: {', '.join(missing)}"


def test_a_package_the_page_does_not_name_is_found():
    assert not named(REPO / "qkviz" / "extraction" / "nowhere", PAGE.read_text(encoding="utf-8"))


def test_no_folder_of_qkviz_or_the_app_holds_more_than_fifteen_modules():
    crowded = {str(folder.relative_to(REPO)): count for folder in packages("qkviz") + packages("dash_app")
               if (count := len(list(folder.glob("*.py")))) > MOST_MODULES}
    assert crowded == {}, f"cut these into subpackages by concept: {crowded}"


#: the most lines a function of qkviz/ or dash_app/ may have, its docstring aside (a longer one splits by step)
MOST_LINES = 60


def function_lengths(path: Path) -> dict[str, int]:
    import ast

    lengths = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                lines -= first.end_lineno - first.lineno + 1
            lengths[f"{path.relative_to(REPO)}:{node.name}"] = lines
    return lengths


def test_no_function_is_longer_than_sixty_lines():
    lengths = {name: lines for root in ("qkviz", "dash_app") for path in sorted((REPO / root).rglob("*.py"))
               for name, lines in function_lengths(path).items()}
    assert max(lengths.values()) > 40, "the lengths are measured"
    assert {name: lines for name, lines in lengths.items() if lines > MOST_LINES} == {}
