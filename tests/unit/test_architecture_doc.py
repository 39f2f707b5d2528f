"""docs/architecture.md names every package of qkviz and of the web app, and no folder of qkviz/ holds more than
:data:`MOST_MODULES` modules: a package that grows past it is cut into subpackages by concept, and the page says
what each one holds."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
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


def test_no_folder_of_qkviz_holds_more_than_fifteen_modules():
    crowded = {str(folder.relative_to(REPO)): count for folder in packages("qkviz")
               if (count := len(list(folder.glob("*.py")))) > MOST_MODULES}
    assert crowded == {}, f"cut these into subpackages by concept: {crowded}"
