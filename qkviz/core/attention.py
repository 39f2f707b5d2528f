"""Attention recomputed from stored queries and keys (numpy only).

The attention a head pays from query ``i`` to key ``j`` of one sentence is
``softmax_j(scale * q_i . k_j + mask_ij)``, with the mask allowing every key in an encoder,
``j <= i`` in a decoder, and additionally ``i - j < window`` under a sliding window. These
functions are the reference the extraction tests compare the model's own attention with, and
what later analyses use, so they stay small and exact.
"""

from __future__ import annotations

import numpy as np


def allowed_pairs(n_tokens: int, causal: bool, sliding_window: int | None = None) -> np.ndarray:
    """Boolean ``[query, key]`` matrix of the pairs that may attend to each other."""
    query = np.arange(n_tokens)[:, None]
    key = np.arange(n_tokens)[None, :]
    allowed = np.ones((n_tokens, n_tokens), dtype=bool)
    if causal:
        allowed &= key <= query
    if sliding_window is not None:
        allowed &= (query - key) < sliding_window
        if not causal:
            allowed &= (key - query) < sliding_window
    return allowed


def attention_logits(queries: np.ndarray, keys: np.ndarray, scale: float,
                     softcap: float | None = None) -> np.ndarray:
    """``[query, key]`` pre-softmax scores ``scale * q . k`` (soft-capped where the model caps)."""
    logits = (np.asarray(queries, dtype=np.float64) @ np.asarray(keys, dtype=np.float64).T) * scale
    if softcap is not None:
        logits = np.tanh(logits / softcap) * softcap
    return logits


def attention_probs(queries: np.ndarray, keys: np.ndarray, scale: float, causal: bool,
                    sliding_window: int | None = None, softcap: float | None = None) -> np.ndarray:
    """Attention probabilities ``[query, key]`` of one head over one sentence.

    ``queries`` and ``keys`` are ``[token, d_head]`` for the same tokens, as stored in a run.
    Returns float64; masked pairs are exactly 0 and every row sums to 1.
    """
    logits = attention_logits(queries, keys, scale, softcap)
    allowed = allowed_pairs(len(logits), causal, sliding_window)
    logits = np.where(allowed, logits, -np.inf)
    logits -= logits.max(axis=1, keepdims=True)
    weights = np.exp(logits)
    return weights / weights.sum(axis=1, keepdims=True)
