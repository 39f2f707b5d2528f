"""Per token of one sequence, for one head: the vectors a circuit's parts are dotted with (:mod:`.head_circuit`).

Each query ``i`` has its strongest partners ``J_i`` (its :data:`PARTNERS` keys of most attention), weighted by their
attention ``a_ij``; from them, per token ``t``:

* ``toward_keys[t] = sum_i a_it q_i`` over the queries ``t`` is a partner of (what a key part at ``t`` is dotted
  with), and ``toward_keys_lift`` the same less each query's weight spread evenly over every key it may attend to;
* ``toward_queries[t] = sum_{j in J_t} a_tj k_j`` (what a query part at ``t`` is dotted with), and
  ``toward_queries_lift`` the same less the query's partner weight times the mean of the keys it may attend to;
* ``received[t] = sum_i a_it`` over every query (the value side reads every pair, not the partners alone).

Every rule's allowed keys are one contiguous range per query (:func:`qkviz.core.attention.allowed_keys`), so the means
over them are differences of prefix sums and the even spread a difference array: apart from the attention itself
(``[query, key]``) and the choice of partners (each row's top :data:`PARTNERS`), nothing is quadratic in the sequence.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qkviz.core.attention import allowed_keys, allowed_pairs, attention_probs
from qkviz.core.logit_rule import LogitRule
from qkviz.store.run import StoredRun

#: each query's partners: its keys of most attention
PARTNERS = 5


@dataclass
class SequenceWeights:
    """Per token of one sequence, for one head: the vectors the parts of each side are dotted with (``[token, d]``),
    the partner attention ``weight`` and the partner logit it weighs (``logit``: ``scale * sum a_ij q_i . k_j``),
    ``received`` ``[token]`` and ``value_weight`` (the sum of every pair's attention) for the value side."""

    toward_keys: np.ndarray
    toward_keys_lift: np.ndarray
    toward_queries: np.ndarray
    toward_queries_lift: np.ndarray
    weight: float
    logit: float
    received: np.ndarray
    value_weight: float


def sequence_weights(run: StoredRun, layer: int, head: int, sentence: int,
                     chosen: np.ndarray | None = None) -> SequenceWeights:
    """The head's partner weights over one sequence, from the stored queries and keys: each query's
    :data:`PARTNERS` strongest keys, or the ``chosen`` pairs (``[query, key]`` booleans of the sequence), weighted
    by their attention."""
    rows = run.sentence_tokens(sentence)
    queries = np.asarray(run.queries(layer, head)[rows], dtype=np.float64)
    keys = np.asarray(run.keys(layer, head)[rows], dtype=np.float64)
    rule = run.logit_rule(layer, head)
    probs = attention_probs(queries, keys, rule)
    if chosen is None:
        return strongest_partner_weights(queries, keys, probs, rule)
    return chosen_pair_weights(queries, keys, probs, rule, chosen)


def strongest_partner_weights(queries: np.ndarray, keys: np.ndarray, probs: np.ndarray,
                              rule: LogitRule) -> SequenceWeights:
    """:class:`SequenceWeights` of each query's :data:`PARTNERS` keys of most attention (``probs``: the head's
    attention ``[query, key]``, exactly 0 where masked), in time linear in the tokens beyond the attention itself."""
    n, width = len(queries), min(PARTNERS, len(queries))
    top = _strongest(probs, width)                                                      # [query, partner]
    weight = np.take_along_axis(probs, top, axis=1)                                     # masked pairs weigh 0
    row_weight = weight.sum(axis=1)
    lo, hi = allowed_keys(np.arange(n), n, rule)
    count = np.maximum(hi - lo, 1)[:, None]
    toward_keys = np.zeros_like(queries)
    np.add.at(toward_keys, top.ravel(), (weight[..., None] * queries[:, None, :]).reshape(-1, queries.shape[1]))
    # each query's partner weight spread evenly over its allowed keys [lo, hi): a difference array, summed up
    spread = np.zeros((n + 1, queries.shape[1]))
    share = queries * (row_weight[:, None] / count)
    np.add.at(spread, lo, share)
    np.add.at(spread, hi, -share)
    prefix = np.concatenate([np.zeros((1, keys.shape[1])), np.cumsum(keys, axis=0)])
    mean_keys = (prefix[hi] - prefix[lo]) / count                                       # [query, d]
    partner_keys = keys[top]                                                            # [query, partner, d]
    toward_queries = np.einsum("ip,ipd->id", weight, partner_keys)
    logit = float(rule.scale * np.einsum("ip,id,ipd->", weight, queries, partner_keys))
    received = probs.sum(axis=0)
    return SequenceWeights(toward_keys, toward_keys - np.cumsum(spread, axis=0)[:n], toward_queries,
                           toward_queries - row_weight[:, None] * mean_keys, float(row_weight.sum()), logit,
                           received, float(received.sum()))


def _strongest(probs: np.ndarray, width: int) -> np.ndarray:
    """Each row's ``width`` largest entries' columns, by ``width`` passes of a row-wise maximum: a seventh of the time
    of a partition (``np.argpartition``) on rows that are half zeros, as a causal head's are."""
    work = probs.copy()
    rows = np.arange(len(probs))
    top = np.empty((len(probs), width), dtype=np.int64)
    for rank in range(width):
        top[:, rank] = np.argmax(work, axis=1)
        work[rows, top[:, rank]] = -np.inf
    return top


def chosen_pair_weights(queries: np.ndarray, keys: np.ndarray, probs: np.ndarray, rule: LogitRule,
                        chosen: np.ndarray) -> SequenceWeights:
    """:class:`SequenceWeights` of the ``chosen`` pairs (``[query, key]`` booleans) that the head may attend,
    weighted by their attention; the value side reads the same pairs."""
    n = len(queries)
    allowed = allowed_pairs(n, rule)
    partners = probs * chosen * allowed
    row_weight = partners.sum(axis=1)
    visible = allowed.astype(np.float64) / np.maximum(allowed.sum(axis=1, keepdims=True), 1)
    toward_keys = partners.T @ queries
    toward_queries = partners @ keys
    logit = float(rule.scale * np.sum(partners * (queries @ keys.T)))
    return SequenceWeights(toward_keys, toward_keys - (visible * row_weight[:, None]).T @ queries, toward_queries,
                           toward_queries - row_weight[:, None] * (visible @ keys), float(row_weight.sum()), logit,
                           partners.sum(axis=0), float(partners.sum()))
