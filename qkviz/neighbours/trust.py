"""Trustworthiness of a layout, and the layouts' goals (partner recall and trustworthiness) with their verdicts.

**Trustworthiness** at ``k`` (Venna & Kaski, 2001; the definition of ``sklearn.manifold.trustworthiness`` with
Euclidean distances) asks whether a layout's near points are near in the space it lays out: for each point ``i``
and each of its ``k`` nearest points ``j`` in the layout, ``r(i, j)`` is ``j``'s rank among ``i``'s neighbours in
the original space (1 for the nearest), and

``T(k) = 1 - 2 / (n k (2n - 3k - 1)) * sum_i sum_j max(0, r(i, j) - k)``,

1 when every layout neighbour is among the ``k`` nearest original points, lower as intruders come from further
away. Computed with numpy over all the given points (``n^2`` distances), so a head's layout is measured on a seeded
sample of at most :data:`TRUST_SAMPLE` of its points (:func:`layout_trust`; :func:`trust_reference` samples and
measures the points once for all of a head's layouts, :func:`reference_trust` measures each layout): both the original points and the
layout are restricted to the sample, as ``bench/faithful.py`` measures it. Where original distances tie, a point
takes the best of the tied ranks (sklearn's ``argsort`` leaves the order of ties unspecified).

**The goals** (issue 22), judged per head and per layout: partner recall@10 (:mod:`qkviz.neighbours.partner_recall`,
the mean of the query-to-key and key-to-query sides) at least :data:`RECALL_GOAL` and trustworthiness at least
:data:`TRUST_GOAL`. The report and the app's single-head view both say them with :func:`goal_verdict`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: neighbours of trustworthiness (the ``k`` of partner recall too)
TRUST_K = 10
#: points of a head's joint query/key cloud on which trustworthiness is measured (a seeded sample past it)
TRUST_SAMPLE = 1_000
#: partner recall@10 (mean of both sides) a layout should reach on every head
RECALL_GOAL = 0.30
#: trustworthiness at k = 10 a layout should reach on every head
TRUST_GOAL = 0.90
_ROWS = 64                         # sampled points whose ranks are counted at once (rows x k x n comparisons)


@dataclass(frozen=True)
class TrustReference:
    """The points a head's layouts are measured against, sampled once: ``chosen`` (int64 rows of the layouts, in
    order) and their ``[m, m]`` squared distances (the diagonal infinite), shared by every layout of the head."""

    chosen: np.ndarray
    distances: np.ndarray
    k: int


def trust_reference(points: np.ndarray, k: int = TRUST_K, sample: int | None = TRUST_SAMPLE,
                    seed: int = 0) -> TrustReference:
    """A seeded sample of ``sample`` rows of ``points`` (all with ``None``) and their distances."""
    n = len(points)
    chosen = (np.arange(n) if sample is None or sample >= n
              else np.sort(np.random.default_rng(seed).choice(n, size=sample, replace=False)))
    return TrustReference(chosen, _squared_distances(np.asarray(points, dtype=np.float64)[chosen]), k)


def reference_trust(reference: TrustReference, layout: np.ndarray) -> float:
    """Trustworthiness at ``reference.k`` of ``layout`` (all the points' rows) on the reference's sample; NaN
    when the sample is too small for ``k`` (fewer than ``2k + 1`` points)."""
    m, k = len(reference.chosen), reference.k
    if k < 1 or k >= m / 2:
        return math.nan
    original = reference.distances
    laid_out = _squared_distances(np.asarray(layout, dtype=np.float64)[reference.chosen])
    near = np.argpartition(laid_out, k - 1, axis=1)[:, :k]          # each point's k nearest in the layout
    penalty = 0
    for start in range(0, m, _ROWS):
        rows = original[start:start + _ROWS]
        reached = np.take_along_axis(rows, near[start:start + _ROWS], axis=1)
        ranks = 1 + (rows[:, None, :] < reached[:, :, None]).sum(axis=2)   # rank among the point's originals
        penalty += int(np.maximum(ranks - k, 0).sum())
    return float(1.0 - penalty * (2.0 / (m * k * (2.0 * m - 3.0 * k - 1.0))))


def trustworthiness(points: np.ndarray, layout: np.ndarray, k: int = TRUST_K) -> float:
    """Trustworthiness at ``k`` of ``layout`` ``[n, dim]`` against ``points`` ``[n, d]`` (row ``i`` of one is row
    ``i`` of the other), Euclidean both; ``k`` must be below ``n / 2``, as in sklearn."""
    n = len(points)
    if len(layout) != n:
        raise ValueError(f"a layout of {len(layout)} points does not lay out {n} points")
    if k < 1 or k >= n / 2:
        raise ValueError(f"trustworthiness needs 1 <= k < n / 2 (k {k}, n {n})")
    return reference_trust(trust_reference(points, k, None), layout)


def layout_trust(points: np.ndarray, layout: np.ndarray, k: int = TRUST_K, sample: int | None = TRUST_SAMPLE,
                 seed: int = 0) -> float:
    """:func:`trustworthiness` of ``layout`` on a seeded sample of ``sample`` of its rows (all with ``None``);
    NaN when there are too few points for ``k`` (fewer than ``2k + 1``). Several layouts of the same points:
    one :func:`trust_reference`, then :func:`reference_trust` of each."""
    if len(layout) != len(points):
        raise ValueError(f"a layout of {len(layout)} points does not lay out {len(points)} points")
    return reference_trust(trust_reference(points, k, sample, seed), layout)


def meets_goals(recall: float | None, trust: float | None) -> bool:
    """Whether a layout of a head reaches both goals (unknown figures reach none)."""
    return _known(recall) and _known(trust) and recall >= RECALL_GOAL and trust >= TRUST_GOAL


def goal_verdict(recall: float | None, trust: float | None) -> str:
    """``partner recall@10 31% (goal 30%: met), trustworthiness 0.87 (goal 0.90: not met)``; an unknown figure
    (None or NaN: a report made before the figure existed) is ``unknown``."""
    recall_text = (f"partner recall@10 {recall:.0%} (goal {RECALL_GOAL:.0%}: {_met(recall >= RECALL_GOAL)})"
                   if _known(recall) else f"partner recall@10 unknown (goal {RECALL_GOAL:.0%})")
    trust_text = (f"trustworthiness {trust:.2f} (goal {TRUST_GOAL:.2f}: {_met(trust >= TRUST_GOAL)})"
                  if _known(trust) else f"trustworthiness unknown (goal {TRUST_GOAL:.2f})")
    return f"{recall_text}, {trust_text}"


def _known(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _met(met: bool) -> str:
    return "met" if met else "not met"


def _squared_distances(points: np.ndarray) -> np.ndarray:
    """``[n, n]`` squared Euclidean distances (float64), the diagonal infinite (a point is not its own neighbour)."""
    squared = (points ** 2).sum(axis=1)
    distances = np.maximum(squared[:, None] + squared[None, :] - 2 * points @ points.T, 0.0)
    np.fill_diagonal(distances, np.inf)
    return distances
