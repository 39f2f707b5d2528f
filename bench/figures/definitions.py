"""A result file's verdicts against the definition its page gives: the one check that a row called "exact" (or any
other verdict a page defines by bounds) is what the page says the word means, and that the page says it.

A :class:`Definition` is the page's word (``"exact"``), the page that defines it, and the bounds a row's recorded
figures must meet to be given it (:class:`Bound`: a field at most or at least a value, and the words in which the
page states that bound). A row may have a bound of its own only with a stated reason (``Bound.own``: the row's
name, its bound, why). A bench writes :func:`record` beside its rows, so the result file says which definition its
verdicts follow; a test checks the file with :func:`problems`:

* a row given the word whose figures miss a bound (a missing figure misses it), or a row given one of the
  definition's other verdicts (``Definition.otherwise``, e.g. "not shown exact") whose figures meet every bound;
* a result file whose recorded definition is not the declared one;
* a bound (or an own bound's name) the page does not state outside its generated figure blocks.

No bench's own definition is declared here (each sits beside its bench); nothing here imports the benches.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

#: a generated figure block of a page (``python -m bench.figures``): not the page's own words
_BLOCK = re.compile(r"<!-- figures:[\w-]+ -->.*?<!-- /figures -->", re.S)


@dataclass(frozen=True)
class Bound:
    """``row[figure] <= most`` (or ``>= least``); ``stated``: the words in which the page gives it (searched
    outside figure blocks, whitespace as one space). ``own``: a row's own bound in place of ``most``/``least``, by
    the row's name, with the reason that allows it: ``{"mobilebert": (3e-4, "float32 rounding of ...")}``."""

    figure: str
    most: float | None = None
    least: float | None = None
    stated: str = ""
    own: Mapping[str, tuple[float, str]] = field(default_factory=dict)

    def __post_init__(self):
        if (self.most is None) == (self.least is None):
            raise ValueError(f"bound on {self.figure!r}: give most or least, not both or neither")
        for name, (_, reason) in self.own.items():
            if not reason.strip():
                raise ValueError(f"bound on {self.figure!r}: {name}'s own bound gives no reason")

    def value(self, name: str | None = None) -> float:
        """The bound for the row named ``name`` (its own where it has one)."""
        if name in self.own:
            return self.own[name][0]
        return self.most if self.most is not None else self.least

    def missed(self, row: Mapping, name: str | None = None) -> str | None:
        """Why ``row`` misses this bound (``"max_error 1.5e-04 > 1e-05"``), or None where it meets it."""
        value, bound = row.get(self.figure), self.value(name)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
            return f"{self.figure} not recorded"
        if self.most is not None and not value <= bound:
            return f"{self.figure} {value:.2g} > {bound:g}" + (" (its own bound)" if name in self.own else "")
        if self.least is not None and not value >= bound:
            return f"{self.figure} {value:.2g} < {bound:g}" + (" (its own bound)" if name in self.own else "")
        return None


@dataclass(frozen=True)
class Definition:
    """A verdict a page defines by bounds: ``word`` (``row[status] == word``) only where every bound holds;
    ``otherwise``: the verdicts the page gives a row judged by the same figures that misses one (a row of any
    other verdict, e.g. refused, has no figures and is not judged); ``name``: the field that names a row (for
    own bounds and messages)."""

    word: str
    page: str
    bounds: tuple[Bound, ...]
    otherwise: tuple[str, ...] = ()
    name: str = "model_type"
    status: str = "status"

    def missed(self, row: Mapping) -> list[str]:
        """The bounds ``row``'s figures miss (empty: the row meets the definition)."""
        name = row.get(self.name)
        return [why for bound in self.bounds if (why := bound.missed(row, name)) is not None]

    def judge(self, row: Mapping) -> bool:
        """Whether ``row``'s figures meet every bound (whatever verdict it was given)."""
        return not self.missed(row)


def record(definition: Definition) -> dict:
    """The definition as a bench writes it beside its rows (JSON): word, page, bounds, own bounds with reasons."""
    def bound(b: Bound) -> dict:
        entry = {"figure": b.figure, "most" if b.most is not None else "least": b.value(), "stated": b.stated}
        if b.own:
            entry["own"] = {name: {"bound": value, "reason": reason} for name, (value, reason) in b.own.items()}
        return entry
    return {"word": definition.word, "page": definition.page, "otherwise": list(definition.otherwise),
            "bounds": [bound(b) for b in definition.bounds]}


def disagreements(definition: Definition, rows: Iterable[Mapping], where: str = "") -> list[str]:
    """One line per row whose verdict disagrees with ``definition``: given the word and missing a bound, or given
    one of its ``otherwise`` verdicts and meeting every bound. ``where`` prefixes each line (the file, a release)."""
    lines = []
    for row in rows:
        status, name = row.get(definition.status), row.get(definition.name, "?")
        if status == definition.word and (missed := definition.missed(row)):
            lines.append(f"{where}{name} is called {definition.word}: {'; '.join(missed)}")
        elif status in definition.otherwise and definition.judge(row):
            lines.append(f"{where}{name} is called {status}, yet meets every bound of {definition.word}")
    return lines


def page_text(root: Path, page: str) -> str:
    """``page``'s own words: its text without the generated figure blocks, whitespace as one space."""
    text = _BLOCK.sub(" ", (root / page).read_text(encoding="utf-8"))
    return " ".join(text.split())


def unstated(definition: Definition, root: Path) -> list[str]:
    """One line per bound the page does not state in its own words (outside figure blocks), and per row with an
    own bound that the page does not name."""
    text = page_text(root, definition.page)
    lines = [f"{definition.page} does not state {definition.word}'s bound on {bound.figure}: {bound.stated!r}"
             for bound in definition.bounds if not bound.stated or " ".join(bound.stated.split()) not in text]
    lines += [f"{definition.page} does not name {name}'s own bound on {bound.figure} ({reason})"
              for bound in definition.bounds for name, (_, reason) in bound.own.items() if name not in text]
    return lines


def problems(definition: Definition, rows: Iterable[Mapping], *, recorded: Mapping | None = None,
             root: Path | None = None, where: str = "") -> list[str]:
    """Everything wrong between a result file's rows, the definition it records and the page: :func:`disagreements`,
    a ``recorded`` definition (the file's, where given) other than ``record(definition)``, and (with the checkout's
    ``root``) :func:`unstated`. Empty: every verdict is what its page says the word means."""
    lines = disagreements(definition, rows, where)
    if recorded is not None and dict(recorded) != record(definition):
        lines.append(f"{where}the result records another definition of {definition.word} than "
                     f"{definition.page}'s: {dict(recorded)} against {record(definition)}")
    if root is not None:
        lines += unstated(definition, root)
    return lines
