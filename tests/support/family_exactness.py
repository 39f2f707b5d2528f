"""What "exact" means for a model type, as docs/families.md defines it: the one declaration that the family sweep
(``support.family_sweep``, ``python -m bench.family_sweep``), the families table's bench (``python -m bench.families``)
and the test of their result files (``tests/unit/bench/test_family_verdicts.py``) all use.

A run is *exact* when the attention recomputed from it is within :data:`TOLERANCE` of the model's own eager
attention and that attention departs from uniform by at least :data:`MIN_DEPARTURE` somewhere (else the comparison
could not have failed). A type may be held to a bound of its own only for a stated reason of precision
(:data:`OWN_BOUNDS`). Kept free of torch, so that a test of the result files loads no model.
"""

from __future__ import annotations

from bench.figures.definitions import Bound, Definition

EXACT = "exact"
#: a run the exactness gate let through (within its bound of the model's attention) that the page's definition does
#: not call exact: further from the model's attention than :data:`TOLERANCE` (its own bound), or too near uniform
#: for the comparison to prove anything
NOT_SHOWN = "not shown exact"
#: a run whose attention differs from the model's by more than the exactness gate allows: qkviz's failure
WRONG = "wrong"

#: the largest difference from the model's own eager attention an exact run may have (float32)
TOLERANCE = 1e-5
#: how far from uniform (1 / the keys a query may see) the model's attention must be somewhere: a check against an
#: attention this near uniform passes whatever the stored vectors are
MIN_DEPARTURE = 0.05
#: a type's own bound in place of :data:`TOLERANCE`, only for a reason of precision, stated
OWN_BOUNDS: dict[str, tuple[float, str]] = {
    "mobilebert": (3e-4, "float32 rounding: its tiny model has no layer norm (NoNorm), so its attention logits grow "
                         "to about 500, which float32 rounds by up to 3e-5; its run differs from the model's own "
                         "float32 attention by 1.5e-4, and by 2.7e-6 with the same model in float64"),
}

#: docs/families.md's definition of exact, as bench.figures.definitions checks a result file against it
FAMILY_EXACT = Definition(
    word=EXACT, page="docs/families.md", otherwise=(NOT_SHOWN, WRONG),
    bounds=(Bound("max_error", most=TOLERANCE, stated="to 1e-5 in float32", own=OWN_BOUNDS),
            Bound("departure_from_uniform", least=MIN_DEPARTURE, stated="at least 0.05 from uniform")))


def bound(model_type: str) -> float:
    """The largest error ``model_type`` may have and be called exact: its own bound, or :data:`TOLERANCE`."""
    return OWN_BOUNDS.get(model_type, (TOLERANCE, ""))[0]


def judge(model_type: str, max_error: float, departure: float, wrong_above: float) -> str:
    """A run's verdict from its largest error against the model's eager attention and that attention's largest
    departure from uniform: :data:`EXACT` within :func:`bound` and at least :data:`MIN_DEPARTURE` from uniform;
    :data:`WRONG` beyond ``wrong_above`` (the exactness gate's bound); :data:`NOT_SHOWN` between."""
    if not max_error <= wrong_above:            # NaN and inf too
        return WRONG
    row = {"model_type": model_type, "max_error": max_error, "departure_from_uniform": departure}
    return EXACT if FAMILY_EXACT.judge(row) else NOT_SHOWN
