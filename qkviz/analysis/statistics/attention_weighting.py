"""A head's attention adjusted as the app's views show it: tokens hidden (the first, the special
ones) with every query's row renormalised (to its keys' share, less a sink's), value-weighted (each key's weight
times what it moves, :func:`moved_norms`), and averaged over the corpus by (query position, key position).

All functions take and return numpy arrays; shapes are ``[query, key]`` for one sentence and
``[query position, key position]`` for the corpus average.
"""

from __future__ import annotations

import numpy as np

from qkviz.core.attention import attention_probs
from qkviz.store.run import StoredRun

#: the corpus average covers query and key positions below this
AGGREGATE_POSITIONS = 64


def moved_norms(run: StoredRun, layer: int, head: int) -> np.ndarray:
    """float32 ``[token]``: what each token's value weighs in value-weighted attention, ``|W_O^h v_j|``
    (:meth:`~qkviz.store.StoredRun.output_norms`), or, in a run without output norms, ``|v_j|`` of the key-value head
    (:meth:`~qkviz.store.StoredRun.value_norms`, which ignores the head's slice of the output projection)."""
    return run.output_norms(layer, head) if run.has_output_norms else run.value_norms(layer, head)


def hidden_tokens(positions: np.ndarray, is_special: np.ndarray, hide_first: bool, hide_special: bool) -> np.ndarray:
    """bool ``[token]``: the tokens the view leaves out (the first one, the special ones, or both)."""
    hidden = np.zeros(len(positions), dtype=bool)
    if hide_first:
        hidden |= positions == 0
    if hide_special:
        hidden |= np.asarray(is_special, dtype=bool)
    return hidden


def adjusted_attention(attention: np.ndarray, hidden: np.ndarray, value_norms: np.ndarray | None = None
                       ) -> np.ndarray:
    """``[query, key]`` weights with hidden keys removed, optionally times each key's value norm
    (``[key]``), every visible query's row renormalised to the share its keys had: 1, or 1 less the sink's
    share where the head has a sink logit (its rows of ``attention`` sum to less than 1; the sink keeps its
    share); hidden queries' rows are 0."""
    weights = np.array(attention, dtype=np.float64)
    shares = weights.sum(axis=1, keepdims=True)
    weights[:, hidden] = 0.0
    if value_norms is not None:
        weights *= np.asarray(value_norms, dtype=np.float64)[None, :]
    totals = weights.sum(axis=1, keepdims=True)
    weights = np.divide(weights * shares, totals, out=np.zeros_like(weights), where=totals > 0)
    weights[hidden] = 0.0
    return weights


def aggregate_attention(run: StoredRun, layer: int, head: int, hide_first: bool = False, hide_special: bool = False,
                        by_value_norm: bool = False, positions: int = AGGREGATE_POSITIONS) -> np.ndarray:
    """float64 ``[query position, key position]``: the head's (adjusted; with ``by_value_norm`` value-weighted by
    :func:`moved_norms`) attention averaged over the corpus's sentences, for positions below ``positions``; NaN
    where no sentence has the pair.

    Queries and keys are read once; each sentence's attention is recomputed from them exactly as
    :meth:`Run.attention` does."""
    queries, keys = run.queries(layer, head), run.keys(layer, head)
    norms = moved_norms(run, layer, head) if by_value_norm else None
    tokens = run.tokens
    token_positions, specials = tokens.position.to_numpy(), tokens.is_special.to_numpy()
    totals = np.zeros((positions, positions))
    counts = np.zeros((positions, positions))
    rule = run.logit_rule(layer, head)
    for first, count in zip(run.sentences.first_token.to_numpy(), run.sentences.n_tokens.to_numpy()):
        rows = slice(int(first), int(first + count))
        attention = attention_probs(queries[rows], keys[rows], rule)
        hidden = hidden_tokens(token_positions[rows], specials[rows], hide_first, hide_special)
        weights = adjusted_attention(attention, hidden, None if norms is None else norms[rows])
        shown = min(int(count), positions)
        visible = ~hidden[:shown]
        totals[:shown, :shown] += weights[:shown, :shown]
        counts[:shown, :shown] += visible[:, None] & visible[None, :]
    return np.divide(totals, counts, out=np.full_like(totals, np.nan), where=counts > 0)
