"""Attention recomputed from stored queries and keys (numpy only): the one place that turns ``q . k`` into the
model's logits and probabilities.

The attention a head pays from query ``i`` to key ``j`` of one sentence is
``softmax_j(softcap * tanh(scale * q_i . k_j / softcap) + alibi_slope * (j - i) + mask_ij)``, the softmax's
denominator including ``exp(sink)`` where the head has a sink logit; which terms a head has is its
:class:`~qkviz.core.logit_rule.LogitRule`. The mask allows every key in an encoder, ``j <= i`` in a decoder, and
additionally ``|i - j| < window`` under a sliding window (``i - j < window`` in a decoder) and ``i // chunk ==
j // chunk`` under chunked attention. Every recomputation in qkviz goes through these functions:
:func:`dot_logits` for dot products already computed (a search's scores, one pair at a time),
:func:`attention_logits` for all pairs of queries and keys (one sentence, or a padded batch of sentences),
:func:`allowed_keys` / :func:`allowed_pairs` for the mask, :func:`masked_softmax` for the probabilities
(:func:`softmax_numerators` its step before the division, for callers that need only some of them). They are
the reference the extraction tests compare the model's own attention with, so they stay small and exact.
"""

from __future__ import annotations

import numpy as np

from qkviz.core.logit_rule import LogitRule


def allowed_keys(position: np.ndarray, length: np.ndarray | int, rule: LogitRule) -> tuple[np.ndarray, np.ndarray]:
    """Per query at sentence ``position`` (of a sentence of ``length`` tokens), the key positions ``[lo, hi)``
    it may attend to under ``rule``'s mask: the whole sentence, up to itself when causal, closer than its window,
    within its chunk (every rule's keys are one contiguous range)."""
    position = np.asarray(position, dtype=np.int64)
    lo = np.zeros_like(position)
    hi = position + 1 if rule.causal else np.broadcast_to(np.asarray(length, dtype=np.int64), position.shape).copy()
    if rule.window is not None:
        lo = np.maximum(lo, position - rule.window + 1)
        if not rule.causal:
            hi = np.minimum(hi, position + rule.window)
    if rule.chunk is not None:
        start = position // rule.chunk * rule.chunk
        lo = np.maximum(lo, start)
        hi = np.minimum(hi, start + rule.chunk)
    return lo, hi


def allowed_pairs(n_tokens: int, rule: LogitRule) -> np.ndarray:
    """Boolean ``[query, key]`` matrix of the pairs of one sentence that may attend to each other."""
    position = np.arange(n_tokens)
    lo, hi = allowed_keys(position, n_tokens, rule)
    return (position[None, :] >= lo[:, None]) & (position[None, :] < hi[:, None])


def dot_logits(dots: np.ndarray, rule: LogitRule, distances: np.ndarray | None = None) -> np.ndarray:
    """float64 logits of dot products ``q . k`` (any shape): ``scale * q . k``, soft-capped where the model caps
    (``softcap * tanh(logit / softcap)``), plus ``alibi_slope * distance`` where the rule has ALiBi and
    ``distances`` (key position minus query position, broadcast against ``dots``) are given: pairs of one sentence.
    Without them the logit is the content logit, the one defined across sentences (:class:`LogitRule`)."""
    logits = np.asarray(dots, dtype=np.float64) * rule.scale
    if rule.softcap:
        logits = np.tanh(logits / rule.softcap) * rule.softcap
    if rule.alibi_slope and distances is not None:
        logits = logits + rule.alibi_slope * np.asarray(distances, dtype=np.float64)
    return logits


def _cap(logits: np.ndarray, softcap: float | None) -> np.ndarray:
    """The soft cap of :func:`dot_logits`, in place on ``logits`` (a fresh float64 array)."""
    if softcap:
        np.divide(logits, softcap, out=logits)
        np.tanh(logits, out=logits)
        logits *= softcap
    return logits


def attention_logits(queries: np.ndarray, keys: np.ndarray, rule: LogitRule, allowed: np.ndarray | None = None, *,
                     query_positions: np.ndarray | None = None, key_positions: np.ndarray | None = None,
                     out: np.ndarray | None = None) -> np.ndarray:
    """``[..., query, key]`` pre-softmax scores (:func:`dot_logits` of every ``q . k``, in float64) of
    ``queries`` ``[..., query, d_head]`` and ``keys`` ``[..., key, d_head]`` (one sentence, or a batch);
    ``-inf`` where ``allowed`` (boolean, broadcast against the scores, e.g. :func:`allowed_pairs`) is false.
    ``query_positions`` / ``key_positions``: the sentence positions of the queries and keys, broadcast against
    ``[..., query]`` / ``[..., key]`` (for the rule's position term); by default ``0, 1, ...`` along each axis,
    which is right for whole sentences and padded batches of them. ``out``: a float64 array of the scores'
    shape to write them into."""
    queries = np.asarray(queries, dtype=np.float64)
    keys = np.asarray(keys, dtype=np.float64)
    logits = np.matmul(queries, np.swapaxes(keys, -1, -2), out=out)   # scaled, capped, biased and masked in place
    logits *= rule.scale
    _cap(logits, rule.softcap)
    if rule.alibi_slope:
        query_at = np.arange(queries.shape[-2]) if query_positions is None else np.asarray(query_positions)
        key_at = np.arange(keys.shape[-2]) if key_positions is None else np.asarray(key_positions)
        bias = rule.alibi_slope * (key_at[..., None, :].astype(np.float64) - query_at[..., :, None])
        if np.broadcast_shapes(logits.shape, bias.shape) == logits.shape:
            logits += bias
        else:
            logits = logits + bias
    if allowed is not None:
        if np.broadcast_shapes(logits.shape, np.shape(allowed)) == logits.shape:
            np.copyto(logits, -np.inf, where=~np.asarray(allowed, dtype=bool))
        else:
            logits = np.where(allowed, logits, -np.inf)
    return logits


def masked_softmax(logits: np.ndarray, allowed: np.ndarray | None = None, *, sink: float | None = None,
                   overwrite: bool = False) -> np.ndarray:
    """Softmax over the last axis among the ``allowed`` entries (and finite ones); masked entries are exactly
    0, and a row with none allowed is all 0. ``sink``: a logit of no key in every row's denominator (the
    rule's), so that a row sums to ``1 - exp(sink) / total``. ``overwrite``: ``logits`` (a float array of the
    result's shape) may be used as the result's storage, to spare a copy."""
    if allowed is not None:
        weights = np.where(allowed, logits, -np.inf)
    else:
        dtype = np.result_type(logits, 0.0)
        weights = logits if overwrite and isinstance(logits, np.ndarray) and logits.dtype == dtype \
            and logits.flags.writeable else np.array(logits, dtype=dtype, copy=True)
    weights, total = softmax_numerators(weights, sink=sink)
    empty = ~(total > 0)
    total[empty] = 1.0
    weights /= total
    if empty.any():
        weights[empty[..., 0]] = 0.0
    return weights


def softmax_numerators(logits: np.ndarray, *, sink: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The softmax of :func:`masked_softmax` before its division, in place on ``logits`` (a float array,
    ``-inf`` where masked): ``exp(logit - top)`` and the rows' totals ``[..., 1]`` (0 for a row with none
    allowed), ``top`` the row's largest finite logit (or the ``sink``, if larger: no term overflows). With a
    ``sink`` a row with keys allowed adds ``exp(sink - top)`` to its total. The probabilities are the one divided
    by the other."""
    top = logits.max(axis=-1, keepdims=True)
    finite = np.isfinite(top)
    if sink is not None:
        top = np.where(finite, np.maximum(top, sink), top)
    top[~finite] = 0.0
    logits -= top
    np.exp(logits, out=logits)
    total = logits.sum(axis=-1, keepdims=True)
    if sink is not None:
        total += np.where(finite, np.exp(sink - top), 0.0)
    return logits, total


def attention_probs(queries: np.ndarray, keys: np.ndarray, rule: LogitRule) -> np.ndarray:
    """Attention probabilities ``[query, key]`` of one head over one sentence under ``rule``.

    ``queries`` and ``keys`` are ``[token, d_head]`` for the same tokens, as stored in a run (or ``[..., token,
    d_head]``: several heads with the same rule at once, ``[..., query, key]``, each as if alone).
    Returns float64; masked pairs are exactly 0 and every row sums to 1 (less its sink's share where the head
    has a sink).
    """
    allowed = allowed_pairs(np.shape(queries)[-2], rule)
    return masked_softmax(attention_logits(queries, keys, rule, allowed), sink=rule.sink, overwrite=True)
