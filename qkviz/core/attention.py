"""Attention recomputed from stored queries and keys (numpy only): the one place that turns ``q . k`` into the
model's logits and probabilities.

The attention a head pays from query ``i`` to key ``j`` of one sentence is
``softmax_j(softcap * tanh(scale * q_i . k_j / softcap) + mask_ij)`` (the soft cap only where the model caps),
with the mask allowing every key in an encoder, ``j <= i`` in a decoder, and additionally ``|i - j| < window``
under a sliding window (``i - j < window`` in a decoder). Every recomputation in qkviz goes through these
functions: :func:`dot_logits` for dot products already computed (a search's scores, one pair at a time),
:func:`attention_logits` for all pairs of queries and keys (one sentence, or a padded batch of sentences),
:func:`allowed_keys` / :func:`allowed_pairs` for the mask, :func:`masked_softmax` for the probabilities
(:func:`softmax_numerators` its step before the division, for callers that need only some of them). They are
the reference the extraction tests compare the model's own attention with, so they stay small and exact.
"""

from __future__ import annotations

import numpy as np


def allowed_keys(position: np.ndarray, length: np.ndarray | int, causal: bool,
                 sliding_window: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per query at sentence ``position`` (of a sentence of ``length`` tokens), the key positions ``[lo, hi)``
    it may attend to: the whole sentence, up to itself when ``causal``, closer than ``sliding_window``."""
    position = np.asarray(position, dtype=np.int64)
    lo = np.zeros_like(position)
    hi = position + 1 if causal else np.broadcast_to(np.asarray(length, dtype=np.int64), position.shape).copy()
    if sliding_window is not None:
        lo = np.maximum(lo, position - sliding_window + 1)
        if not causal:
            hi = np.minimum(hi, position + sliding_window)
    return lo, hi


def allowed_pairs(n_tokens: int, causal: bool, sliding_window: int | None = None) -> np.ndarray:
    """Boolean ``[query, key]`` matrix of the pairs of one sentence that may attend to each other."""
    position = np.arange(n_tokens)
    lo, hi = allowed_keys(position, n_tokens, causal, sliding_window)
    return (position[None, :] >= lo[:, None]) & (position[None, :] < hi[:, None])


def dot_logits(dots: np.ndarray, scale: float, softcap: float | None = None) -> np.ndarray:
    """float64 logits of dot products ``q . k`` (any shape): ``scale * q . k``, soft-capped where the model
    caps (``softcap * tanh(logit / softcap)``; ``softcap`` None or 0: no cap)."""
    logits = np.asarray(dots, dtype=np.float64) * scale
    if softcap:
        logits = np.tanh(logits / softcap) * softcap
    return logits


def _cap(logits: np.ndarray, softcap: float | None) -> np.ndarray:
    """The soft cap of :func:`dot_logits`, in place on ``logits`` (a fresh float64 array)."""
    if softcap:
        np.divide(logits, softcap, out=logits)
        np.tanh(logits, out=logits)
        logits *= softcap
    return logits


def attention_logits(queries: np.ndarray, keys: np.ndarray, scale: float, softcap: float | None = None,
                     allowed: np.ndarray | None = None, *, out: np.ndarray | None = None) -> np.ndarray:
    """``[..., query, key]`` pre-softmax scores (:func:`dot_logits` of every ``q . k``, in float64) of
    ``queries`` ``[..., query, d_head]`` and ``keys`` ``[..., key, d_head]`` (one sentence, or a batch);
    ``-inf`` where ``allowed`` (boolean, broadcast against the scores, e.g. :func:`allowed_pairs`) is false.
    ``out``: a float64 array of the scores' shape to write them into."""
    queries = np.asarray(queries, dtype=np.float64)
    keys = np.asarray(keys, dtype=np.float64)
    logits = np.matmul(queries, np.swapaxes(keys, -1, -2), out=out)   # scaled, capped and masked in place
    logits *= scale
    _cap(logits, softcap)
    if allowed is not None:
        if np.broadcast_shapes(logits.shape, np.shape(allowed)) == logits.shape:
            np.copyto(logits, -np.inf, where=~np.asarray(allowed, dtype=bool))
        else:
            logits = np.where(allowed, logits, -np.inf)
    return logits


def masked_softmax(logits: np.ndarray, allowed: np.ndarray | None = None, *, overwrite: bool = False) -> np.ndarray:
    """Softmax over the last axis among the ``allowed`` entries (and finite ones); masked entries are exactly
    0, and a row with none allowed is all 0. ``overwrite``: ``logits`` (a float array of the result's shape)
    may be used as the result's storage, to spare a copy."""
    if allowed is not None:
        weights = np.where(allowed, logits, -np.inf)
    else:
        dtype = np.result_type(logits, 0.0)
        weights = logits if overwrite and isinstance(logits, np.ndarray) and logits.dtype == dtype \
            and logits.flags.writeable else np.array(logits, dtype=dtype, copy=True)
    weights, total = softmax_numerators(weights)
    empty = ~(total > 0)
    total[empty] = 1.0
    weights /= total
    if empty.any():
        weights[empty[..., 0]] = 0.0
    return weights


def softmax_numerators(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The softmax of :func:`masked_softmax` before its division, in place on ``logits`` (a float array,
    ``-inf`` where masked): ``exp(logit - the row's largest finite logit)`` and the rows' totals ``[..., 1]``
    (0 for a row with none allowed). The probabilities are the one divided by the other."""
    top = logits.max(axis=-1, keepdims=True)
    top[~np.isfinite(top)] = 0.0
    logits -= top
    np.exp(logits, out=logits)
    return logits, logits.sum(axis=-1, keepdims=True)


def attention_probs(queries: np.ndarray, keys: np.ndarray, scale: float, causal: bool,
                    sliding_window: int | None = None, softcap: float | None = None) -> np.ndarray:
    """Attention probabilities ``[query, key]`` of one head over one sentence.

    ``queries`` and ``keys`` are ``[token, d_head]`` for the same tokens, as stored in a run.
    Returns float64; masked pairs are exactly 0 and every row sums to 1.
    """
    allowed = allowed_pairs(len(queries), causal, sliding_window)
    return masked_softmax(attention_logits(queries, keys, scale, softcap, allowed), overwrite=True)
