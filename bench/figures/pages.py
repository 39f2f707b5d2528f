"""Write the README's and the docs' measured figures from ``bench/results/*.json``: ``python -m bench.figures``.

Every figure block of a page sits between ``<!-- figures:NAME -->`` and ``<!-- /figures -->``; this command
rewrites each block from the bench result files its renderer reads, and every block names those files, the date
they were measured and the machine's load average then. ``--check`` rewrites nothing and exits 1 when a page
differs from what the results give (the test suite runs it, so a page cannot drift from its results).
The renderers sit beside the benches that make their result files (``@figure("name")`` in ``bench/NAME.py`` or
``bench/NAME_figures.py``, registered by name with :func:`bench.figures.results.figure` when the module is
imported), and the README's summary blocks, which combine several benches' results, in :mod:`bench.figures.readme`;
:func:`load_blocks` imports them all. A goal is judged only by :func:`bench.figures.goals.verdict`.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import re
import sys
from pathlib import Path

import bench
from bench.figures.goals import NotJudged
from bench.figures.results import FIGURES, Results



def load_blocks() -> None:
    """Register every figure block: import each module of the bench package (a bench's ``@figure`` blocks, in its
    own module or in ``bench/NAME_figures.py``) and the README's summary blocks."""
    for _, name, package in pkgutil.iter_modules(bench.__path__):
        if not package:
            importlib.import_module(f"bench.{name}")
    importlib.import_module("bench.figures.readme")


load_blocks()
REPO = Path(__file__).resolve().parents[2]
#: the pages that may hold figure blocks, and may hold no measured figure outside them: the README and every docs page
PAGES = ("README.md", *sorted(f"docs/{page.name}" for page in (REPO / "docs").glob("*.md")))
#: a block, indented as its opening comment (inside a list item, its lines are indented as the item's)
BLOCK = re.compile(r"^(?P<indent>[ \t]*)(?P<open><!-- figures:(?P<name>[\w-]+) -->\n)(?P<body>.*?)"
                   r"(?P=indent)(?P<close><!-- /figures -->)", re.S | re.M)


def render(text: str, results: Results, page: str) -> str:
    def replace(match: re.Match) -> str:
        name = match["name"]
        if name not in FIGURES:
            raise SystemExit(f"{page}: unknown figure block '{name}' (known: {', '.join(sorted(FIGURES))})")
        try:
            text = FIGURES[name](results)
        except NotJudged as error:
            raise SystemExit(f"{page}: figure block '{name}': {error}") from None
        body = "".join(match["indent"] + line if line.strip() else line for line in text.splitlines(keepends=True))
        return match["indent"] + match["open"] + body + match["indent"] + match["close"]
    return BLOCK.sub(replace, text)


def stale_pages(root: Path, write: bool) -> list[str]:
    """The pages whose figure blocks differ from the results (rewritten when ``write``)."""
    results, stale = Results(root), []
    for page in PAGES:
        path = root / page
        if not path.exists():
            continue
        text = path.read_text(encoding="utf-8")
        wanted = render(text, results, page)
        if wanted != text:
            stale.append(page)
            if write:
                path.write_text(wanted, encoding="utf-8")
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a page is out of date")
    parser.add_argument("--root", type=Path, default=REPO, help="the checkout (default: this one)")
    args = parser.parse_args(argv)
    stale = stale_pages(args.root, write=not args.check)
    if args.check and stale:
        print(f"out of date with bench/results: {', '.join(stale)}; run python -m bench.figures",
              file=sys.stderr)
        return 1
    for page in stale:
        print(f"rewrote {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
