"""Attention partners and how well a layout keeps them (numpy only).

A query's partners are the ``k`` keys anywhere in the corpus with the highest logit ``scale * q . k``
(soft-capped where the model caps); a key's partners are the ``k`` queries that score it highest.
A layout keeps a point's partners when they are among its ``k`` nearest points of the other kind:
**partner recall@k** is the share kept, averaged over points -- the measure of how faithfully a
joint query/key picture shows who attends to whom (``k / n_tokens`` by chance). Ties count: a near
point whose logit reaches the ``k``-th best is a partner (duplicate tokens have equal vectors).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qkviz.core.attention import dot_logits

#: scores computed at once in the blocked searches (rows x columns)
BLOCK_CELLS = 1 << 22


def top_partners(rows: np.ndarray, columns: np.ndarray, k: int, scale: float,
                 softcap: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """For every row vector, the ``k`` columns with the highest ``scale * row . column`` (soft-capped):
    ``(indices [n_rows, k] int64, logits [n_rows, k] float64)``, best first. Exact, in blocks of rows."""
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    columns_t = np.ascontiguousarray(np.asarray(columns, dtype=np.float32).T)
    n_rows, n_columns = len(rows), columns_t.shape[1]
    k = min(k, n_columns)
    indices = np.empty((n_rows, k), dtype=np.int64)
    logits = np.empty((n_rows, k), dtype=np.float64)
    for start, scores in _blocks(rows, n_columns, lambda block: block @ columns_t):
        top = _best(-scores, k)
        indices[start:start + len(scores)] = top
        logits[start:start + len(scores)] = dot_logits(np.take_along_axis(scores, top, axis=1), scale, softcap)
    return indices, logits


def nearest_of(rows: np.ndarray, candidates: np.ndarray, k: int) -> np.ndarray:
    """int64 ``[n_rows, k]``: for every row point, its ``k`` nearest ``candidates`` (Euclidean), nearest first."""
    rows = np.asarray(rows, dtype=np.float64)
    candidates = np.asarray(candidates, dtype=np.float64)
    k = min(k, len(candidates))
    squared = (candidates ** 2).sum(axis=1)
    nearest = np.empty((len(rows), k), dtype=np.int64)
    for start, distances in _blocks(rows, len(candidates), lambda block: squared - 2 * block @ candidates.T):
        nearest[start:start + len(distances)] = _best(distances, k)
    return nearest


@dataclass(frozen=True)
class PartnerSample:
    """A seeded sample of one head's queries and keys, with the ``k``-th best logit of each: what the
    recall of any layout of the head is measured against (computed once, used for every layout)."""

    queries: np.ndarray
    keys: np.ndarray
    scale: float
    softcap: float | None
    k: int
    chosen: np.ndarray                  # int64 token indices of the sampled queries (and keys)
    thresholds: dict[str, np.ndarray]   # side -> [n_chosen] k-th best logit

    def logits(self, side: str, partners: np.ndarray) -> np.ndarray:
        """``[n_chosen, m]`` logits between each sampled point of ``side`` and its ``partners`` (token indices)."""
        own, other = (self.queries, self.keys) if side == "query" else (self.keys, self.queries)
        return dot_logits(np.einsum("rd,rkd->rk", own[self.chosen].astype(np.float64), other[partners].astype(np.float64)),
                          self.scale, self.softcap)


def partner_sample(queries: np.ndarray, keys: np.ndarray, scale: float, k: int = 10, sample: int | None = 200,
                   seed: int = 0, softcap: float | None = None) -> PartnerSample:
    """Sample ``sample`` queries and as many keys (all with ``None``) and find each one's ``k``-th best logit."""
    n = len(queries)
    rng = np.random.default_rng(seed)
    chosen = np.arange(n) if sample is None or sample >= n else np.sort(rng.choice(n, size=sample, replace=False))
    k = min(k, n)
    thresholds = {side: top_partners(own[chosen], other, k, scale, softcap)[1][:, -1]
                  for side, own, other in (("query", queries, keys), ("key", keys, queries))}
    return PartnerSample(queries, keys, scale, softcap, k, chosen, thresholds)


def layout_recall(sample: PartnerSample, layout: np.ndarray) -> dict[str, float]:
    """Partner recall@k of ``layout`` ``[2n, dim]`` (queries first) over ``sample``:
    ``{"query": query->key recall, "key": key->query recall, "chance": k / n}``. Ties count: a near
    point whose logit reaches the k-th best is a partner (duplicate tokens have equal vectors)."""
    n = len(sample.queries)
    if layout.shape[0] != 2 * n:
        raise ValueError(f"a layout of {layout.shape[0]} points does not hold the head's {n} queries and keys")
    shares = {}
    for side, own_points, other_points in (("query", layout[:n], layout[n:]), ("key", layout[n:], layout[:n])):
        near = nearest_of(own_points[sample.chosen], other_points, sample.k)
        threshold = sample.thresholds[side][:, None]
        kept = (sample.logits(side, near) >= threshold - 1e-5 * np.abs(threshold)).sum(axis=1)
        shares[side] = float(kept.mean() / sample.k)
    shares["chance"] = sample.k / n
    return shares


def partner_recall(queries: np.ndarray, keys: np.ndarray, scale: float, layout: np.ndarray, k: int = 10,
                   sample: int | None = 200, seed: int = 0, softcap: float | None = None) -> dict[str, float]:
    """Partner recall@``k`` of one ``layout`` of a head (:func:`layout_recall` of a :func:`partner_sample`)."""
    return layout_recall(partner_sample(queries, keys, scale, k, sample, seed, softcap), layout)


def _blocks(rows: np.ndarray, n_columns: int, score):
    """``(start, score(block))`` over blocks of ``rows`` holding about :data:`BLOCK_CELLS` scores each."""
    block = max(1, BLOCK_CELLS // max(n_columns, 1))
    for start in range(0, len(rows), block):
        yield start, score(rows[start:start + block])


def _best(costs: np.ndarray, k: int) -> np.ndarray:
    """Column indices of each row's ``k`` smallest ``costs``, smallest first (ties by index)."""
    if k < costs.shape[1]:
        top = np.argpartition(costs, k - 1, axis=1)[:, :k]
    else:
        top = np.tile(np.arange(costs.shape[1]), (len(costs), 1))
    order = np.argsort(np.take_along_axis(costs, top, axis=1), axis=1, kind="stable")
    return np.take_along_axis(top, order, axis=1)
