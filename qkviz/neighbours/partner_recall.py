"""Partner recall: how well a layout keeps each point's attention partners.

A query's partners are the ``k`` keys anywhere in the corpus with the highest logit ``scale * q . k``
(soft-capped where the model caps); a key's partners are the ``k`` queries that score it highest
(:func:`qkviz.neighbours.top_k.top_logits`, exact). A layout keeps a point's partners when they are among its
``k`` nearest points of the other kind (:func:`~qkviz.neighbours.top_k.nearest_euclidean`): **partner
recall@k** is the share kept, averaged over points -- the measure of how faithfully a joint query/key picture
shows who attends to whom (``k / n_tokens`` by chance). Ties count: a near point whose logit reaches the
``k``-th best is a partner (duplicate tokens have equal vectors).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qkviz.core.attention import dot_logits
from qkviz.core.logit_rule import LogitRule
from qkviz.neighbours.top_k import nearest_euclidean, top_logits


@dataclass(frozen=True)
class PartnerSample:
    """A seeded sample of one head's queries and keys, with the ``k``-th best logit of each: what the
    recall of any layout of the head is measured against (computed once, used for every layout)."""

    queries: np.ndarray
    keys: np.ndarray
    rule: LogitRule
    k: int
    chosen: np.ndarray                  # int64 token indices of the sampled queries (and keys)
    thresholds: dict[str, np.ndarray]   # side -> [n_chosen] k-th best logit

    def logits(self, side: str, partners: np.ndarray) -> np.ndarray:
        """``[n_chosen, m]`` logits between each sampled point of ``side`` and its ``partners`` (token indices)."""
        own, other = (self.queries, self.keys) if side == "query" else (self.keys, self.queries)
        return dot_logits(np.einsum("rd,rkd->rk", own[self.chosen].astype(np.float64), other[partners].astype(np.float64)),
                          self.rule)


def partner_sample(queries: np.ndarray, keys: np.ndarray, rule: LogitRule, k: int = 10, sample: int | None = 200,
                   seed: int = 0) -> PartnerSample:
    """Sample ``sample`` queries and as many keys (all with ``None``) and find each one's ``k``-th best logit
    (the content logit of ``rule``: partners are sought across sentences)."""
    n = len(queries)
    rng = np.random.default_rng(seed)
    chosen = np.arange(n) if sample is None or sample >= n else np.sort(rng.choice(n, size=sample, replace=False))
    k = min(k, n)
    thresholds = {side: top_logits(own[chosen], other, k, rule)[1][:, -1]
                  for side, own, other in (("query", queries, keys), ("key", keys, queries))}
    return PartnerSample(queries, keys, rule, k, chosen, thresholds)


def layout_recall(sample: PartnerSample, layout: np.ndarray) -> dict[str, float]:
    """Partner recall@k of ``layout`` ``[2n, dim]`` (queries first) over ``sample``:
    ``{"query": query->key recall, "key": key->query recall, "chance": k / n}``. Ties count: a near
    point whose logit reaches the k-th best is a partner (duplicate tokens have equal vectors)."""
    n = len(sample.queries)
    if layout.shape[0] != 2 * n:
        raise ValueError(f"a layout of {layout.shape[0]} points does not hold the head's {n} queries and keys")
    shares = {}
    for side, own_points, other_points in (("query", layout[:n], layout[n:]), ("key", layout[n:], layout[:n])):
        near = nearest_euclidean(own_points[sample.chosen], other_points, sample.k)
        threshold = sample.thresholds[side][:, None]
        kept = (sample.logits(side, near) >= threshold - 1e-5 * np.abs(threshold)).sum(axis=1)
        shares[side] = float(kept.mean() / sample.k)
    shares["chance"] = sample.k / n
    return shares


def partner_recall(queries: np.ndarray, keys: np.ndarray, rule: LogitRule, layout: np.ndarray, k: int = 10,
                   sample: int | None = 200, seed: int = 0) -> dict[str, float]:
    """Partner recall@``k`` of one ``layout`` of a head (:func:`layout_recall` of a :func:`partner_sample`)."""
    return layout_recall(partner_sample(queries, keys, rule, k, sample, seed), layout)
