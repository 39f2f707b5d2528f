"""Rank statistics of the distance-dot correlation (numpy only): every pair's value ranked over all pairs and
within its query with one sort, Pearson and Spearman over all pairs, Spearman within each query averaged, and
a distribution-free bound on Pearson's sampling error. :mod:`qkviz.analysis.statistics.correlation` applies them to
each head and space."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RankedValues:
    """Per-pair values with their ranks: over all pairs (ties averaged) and within each query."""

    values: np.ndarray
    ranks: np.ndarray          # 0-based, ties get their average rank
    query_ranks: np.ndarray    # 0-based ordinal rank among the same query's pairs
    query_varies: np.ndarray   # bool per query group: not all of its values are equal


@dataclass(frozen=True)
class QueryGroups:
    """Which query each pair belongs to, as dense group numbers."""

    group_of: np.ndarray       # [n_pairs] group number of each pair
    size: np.ndarray           # [n_groups] pairs per group

    @classmethod
    def of(cls, query_index: np.ndarray) -> "QueryGroups":
        _, group_of = np.unique(query_index, return_inverse=True)
        return cls(group_of=group_of, size=np.bincount(group_of))

    @property
    def start(self) -> np.ndarray:
        return np.cumsum(self.size) - self.size


def rank_values(values: np.ndarray, groups: QueryGroups) -> RankedValues:
    """One sort of ``values`` gives both rankings; a stable sort of the group numbers of the sorted
    values (a radix sort for up to 65,536 queries) orders them by (query, value)."""
    count = len(values)
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    new_value = np.concatenate([[True], ordered[1:] != ordered[:-1]])
    tie_start = np.flatnonzero(new_value)
    tie_end = np.append(tie_start[1:], count)
    ranks = np.empty(count)
    ranks[order] = ((tie_start + tie_end - 1) / 2)[np.cumsum(new_value) - 1]

    group_dtype = np.uint16 if len(groups.size) <= 1 << 16 else np.int64
    by_query = order[np.argsort(groups.group_of[order].astype(group_dtype), kind="stable")]
    query_ranks = np.empty(count)
    start = groups.start
    query_ranks[by_query] = np.arange(count) - start[groups.group_of[by_query]]
    last = np.maximum(start + groups.size - 1, 0)
    query_varies = values[by_query[last]] > values[by_query[start]]
    return RankedValues(values, ranks, query_ranks, query_varies)


def correlations(distances: RankedValues, dots: RankedValues) -> tuple[float, float]:
    """(Pearson, Spearman) between distances and dot products over all pairs; NaN when constant."""
    if len(dots.values) < 2 or np.ptp(distances.values) == 0 or np.ptp(dots.values) == 0:
        return float("nan"), float("nan")
    pearson = np.corrcoef(distances.values, dots.values)[0, 1]
    spearman = np.corrcoef(distances.ranks, dots.ranks)[0, 1]
    return float(pearson), float(spearman)


def mean_query_spearman(distances: RankedValues, dots: RankedValues, groups: QueryGroups,
                        min_keys: int = 3) -> float:
    """Spearman between distance and dot product among each query's own keys, averaged over queries.

    This is the figure that matters to the softmax, which compares a query's logits only with each
    other; per-query constants (key translation) do not change it. Queries with fewer than
    ``min_keys`` keys, or with constant values, are left out. Ranks are ordinal (ties broken by
    order), for all queries at once."""
    size = groups.size
    centre = (size[groups.group_of] - 1) / 2
    covariance = np.bincount(groups.group_of, (distances.query_ranks - centre) * (dots.query_ranks - centre),
                             minlength=len(size))
    variance = (size.astype(np.float64) ** 3 - size) / 12   # of the ranks 0..n-1, times n
    usable = (size >= min_keys) & distances.query_varies & dots.query_varies
    if not usable.any():
        return float("nan")
    return float(np.mean(covariance[usable] / variance[usable]))


def sampling_error_bound(x: np.ndarray, y: np.ndarray) -> float:
    """Half-width of the 95% interval of Pearson's r of a uniform sample ``(x, y)`` of pairs.

    The large-sample variance of r without assuming normality (from the fourth moments of the
    standardised values; it reduces to ``(1 - r^2)^2 / n`` for normal data): heavy-tailed dot
    products make Fisher's normal-theory interval several times too narrow. Applied to ranks,
    it bounds Spearman's coefficient."""
    n = len(x)
    if n < 4 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    x = (x - x.mean()) / x.std()
    y = (y - y.mean()) / y.std()
    r = np.mean(x * y)
    x2, y2 = x * x, y * y
    variance = (np.mean(x2 * y2) * (1 + r * r / 2) - r * (np.mean(x2 * x * y) + np.mean(x * y2 * y))
                + r * r / 4 * (np.mean(x2 * x2) + np.mean(y2 * y2)))
    return float(1.96 * np.sqrt(max(variance, 0.0) / n))
