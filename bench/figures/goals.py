"""Goals and their verdicts: the one rule by which every page says whether a goal is met.

A :class:`Goal` declares what a page promises (the bound, its unit and direction) and the quantity that judges it:
the result file and how to read that quantity from it. :func:`verdict` is the only function that says "met" or
"**not met**", and it says it from that quantity alone. The rule every declaration follows:

* the quantity is what the user meets, from their action to the drawn result (a search is judged on Enter to the
  matches drawn, never on the server's callback alone);
* time is wall time (never CPU time divided by cores, never an estimate);
* a page's size is what a browser reads when it opens the page cold (its own bytes and every script it loads).

Figure blocks state a goal only through :func:`verdict` (or :meth:`Goal.stated` where a goal is a criterion in a
sentence, next to a verdict); ``tests/unit/bench/test_readme_figures.py`` renders every block and refuses a bound that no
goal produced, and a goal phrase outside a block.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

#: every verdict given while rendering, with the goal it judged (the test of the pages reads it block by block)
ISSUED: list[tuple["Goal", str]] = []
#: every bound stated through :meth:`Goal.stated`, in the order stated
STATED: list[str] = []


@dataclass(frozen=True)
class Goal:
    """A goal a page states, and the result-file quantity that judges it.

    ``read`` takes the result file (``bench/results/<result>.json``, as a dict; with several files in ``result``, a
    dict of them by name) and returns the quantity in ``unit``, or None when the files do not hold it; ``quantity``
    says in words what it reads (the page prints it beside the verdict, so a reader sees what was judged)."""

    what: str
    bound: float
    unit: str
    at_most: bool
    result: str | tuple[str, ...]
    quantity: str
    read: Callable[[dict], float | None]
    digits: int = 1

    def amount(self, value: float, digits: int | None = None) -> str:
        """``value`` in the goal's unit, as the pages write it (to ``digits`` decimals, the goal's by default)."""
        number = f"{value:,.{self.digits if digits is None else digits}f}"
        return f"{number}{self.unit}" if self.unit in ("×", "%", "") else f"{number} {self.unit}"

    def bound_text(self) -> str:
        """``≤ 3 s``, ``≥ 0.9``: the bound with the decimals it was declared with, no more."""
        digits = len(f"{self.bound:g}".partition(".")[2])
        return f"{'≤' if self.at_most else '≥'} {self.amount(self.bound, digits)}"

    def stated(self) -> str:
        """The bound as the pages write it where a goal is a criterion in a sentence (a verdict beside it)."""
        text = self.bound_text()
        STATED.append(text)
        return text

    def met(self, value: float) -> bool:
        return value <= self.bound if self.at_most else value >= self.bound


class NotJudged(LookupError):
    """A goal's quantity is not in its result file: a page cannot say met or not met."""


def value(goal: Goal, results) -> float:
    """The quantity that judges ``goal``, read from its result file (``results`` is :class:`bench.figures.results.Results`)."""
    files = (results(goal.result) if isinstance(goal.result, str)
             else {name: results(name) for name in goal.result})
    found = goal.read(files)
    if found is None:
        raise NotJudged(f"bench/results/{goal.result}.json holds no {goal.quantity} to judge '{goal.what}' by")
    return found


def verdict(goal: Goal, results) -> str:
    """``≤ 3 s, **not met** (navigation to drawn, cold median: 4.4 s)``: the goal, met or **not met**, and the
    quantity that says so."""
    found = value(goal, results)
    said = "met" if goal.met(found) else "**not met**"
    text = f"{goal.bound_text()}, {said} ({goal.quantity}: {goal.amount(found)})"
    ISSUED.append((goal, text))
    return text


def median(values) -> float:
    """The median of ``values`` (the goals' reads need no more statistics than this)."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
