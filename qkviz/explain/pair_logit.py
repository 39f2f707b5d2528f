"""Why query ``i`` meets key ``j`` in one head: the logit split by the parts of the residual stream.

:func:`explain_pair` runs the run's model (:mod:`qkviz.probes.model_on_demand`) over the sequence(s) of the two
tokens -- one pass when they share a sequence, one each when partner search paired them across sequences -- splits
the head's query at ``i`` and key at ``j`` by the parts that wrote them
(:func:`qkviz.extraction.query_key_parts`; a sequence traced once answers its further pairs without a pass:
:mod:`qkviz.explain.traced_streams`), checks that those add up to the run's stored query and key, and
returns the split the caller asked for (:mod:`qkviz.analysis.logits.logit_attribution`). A pair the head's mask forbids
(attention 0) is refused first, in one line saying why (:func:`masked_pair`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from qkviz.analysis.logits.logit_attribution import BY, dimension_split, pair_split, side_split
from qkviz.core.attention import allowed_keys
from qkviz.core.errors import QkvizError
from qkviz.explain.traced_streams import sequence_parts
from qkviz.probes.model_on_demand import run_model
from qkviz.store.run import StoredRun

#: how far the model's query and key at the two tokens may be from the run's stored ones (relative to their size;
#: float16 storage rounds to ~1e-3); a larger gap means the sequence was not reproduced
STORED_TOLERANCE = 1e-2


def check_token(run: StoredRun, name: str, token) -> int:
    """``token`` as a row of the run's token table, or a one-line error."""
    if isinstance(token, bool) or not isinstance(token, (int, np.integer)):
        raise QkvizError(f"{name} must be a token index (an integer row of run.tokens), got {token!r}")
    if not 0 <= int(token) < len(run.tokens):
        raise QkvizError(f"{name} {token} is outside the run's {len(run.tokens)} tokens (0..{len(run.tokens) - 1})")
    return int(token)


def masked_pair(run: StoredRun, layer: int, head: int, query: int, key: int) -> str | None:
    """Why head ``(layer, head)``'s mask forbids token ``query`` to meet token ``key`` (attention 0: no logit of
    theirs reaches the softmax), in one line, or None where they may meet. Masked: a key after the query in a causal
    model, one outside the query's sliding window, one in another chunk (:class:`qkviz.core.LogitRule`,
    :func:`qkviz.core.attention.allowed_keys`). A pair across two sequences is not masked: partner search pairs
    them by their content logit. (A run holds no padding: every token of a sequence is real.)"""
    tokens = run.tokens
    sentence = int(tokens.sentence.iat[query])
    if int(tokens.sentence.iat[key]) != sentence:
        return None
    rule = run.logit_rule(layer, head)
    at_query, at_key = int(tokens.position.iat[query]), int(tokens.position.iat[key])
    lo, hi = allowed_keys(np.array([at_query]), int(run.sentences.n_tokens.iat[sentence]), rule)
    if lo[0] <= at_key < hi[0]:
        return None
    if rule.causal and at_key > at_query:
        why = f"key {key} comes after query {query} in this causal model"
    elif rule.window is not None and abs(at_key - at_query) >= rule.window:
        why = (f"key {key} is {abs(at_key - at_query)} positions from query {query}, outside layer {layer}'s "
               f"sliding window of {rule.window}")
    else:
        why = f"key {key} is in another chunk of {rule.chunk} tokens than query {query} (layer {layer}'s chunked " \
              "attention)"
    return f"{why}: the pair is masked (attention 0)"


def _close_to_stored(parts_sum: np.ndarray, stored: np.ndarray) -> bool:
    return float(np.abs(parts_sum - stored).max()) <= STORED_TOLERANCE * max(float(np.abs(stored).max()), 1e-6)


def split_vectors(run: StoredRun, model, layer: int, head: int, query: int, key: int):
    """``(query names, query parts [P, d], key names, key parts [P', d])`` of head ``(layer, head)`` at tokens
    ``query`` and ``key``, checked against the run's stored vectors."""
    tokens = run.tokens
    sentences, positions = tokens.sentence.to_numpy(), tokens.position.to_numpy()
    kv_head = run.kv_head(head)
    if sentences[query] == sentences[key]:
        wanted = sorted({int(positions[query]), int(positions[key])})
        parts = sequence_parts(run, model, int(sentences[query]), wanted, layer)
        query_side = (parts.query_names, parts.queries[:, head, wanted.index(int(positions[query]))])
        key_side = (parts.key_names, parts.keys[:, kv_head, wanted.index(int(positions[key]))])
    else:
        at_query = sequence_parts(run, model, int(sentences[query]), [int(positions[query])], layer)
        at_key = sequence_parts(run, model, int(sentences[key]), [int(positions[key])], layer)
        query_side = (at_query.query_names, at_query.queries[:, head, 0])
        key_side = (at_key.key_names, at_key.keys[:, kv_head, 0])
    for side, (_names, vectors), stored in (("query", query_side, run.vector_rows("queries", layer, head, [query])[0]),
                                            ("key", key_side, run.vector_rows("keys", layer, head, [key])[0])):
        if not _close_to_stored(vectors.sum(axis=0), stored):
            raise QkvizError(f"the model's {side} at token {query if side == 'query' else key} is not the one run "
                             f"{run.path} stored for layer {layer} head {head}: the run's sequence was not reproduced "
                             "(was it extracted with other settings or another model?)")
    return query_side[0], query_side[1], key_side[0], key_side[1]


def explain_pair(run: StoredRun, layer: int, head: int, query: int, key: int, by: str = "pair", *, model=None,
                 device: str = "cpu") -> pd.DataFrame:
    """Why token ``query`` meets token ``key`` in head ``(layer, head)``: the head's pre-softmax logit split exactly.

    ``by="pair"``: columns ``query_part``, ``key_part``, ``contribution``; ``"query"`` / ``"key"``: ``part``,
    ``contribution`` (one side's parts against the other side's whole vector); ``"dimension"``: dimensions, or
    rotary frequency bands. Sorted by ``|contribution|`` (bands: by wavelength). ``attrs`` holds the ``logit`` the
    rows add up to, the tokens, and ``softcap`` where the model caps the logit after this split."""
    if by not in BY:
        raise QkvizError(f"by must be one of {', '.join(BY)}, got {by!r}")
    return explain_pair_splits(run, layer, head, query, key, (by,), model=model, device=device)[by]


def explain_pair_splits(run: StoredRun, layer: int, head: int, query: int, key: int, bys=BY, *, model=None,
                        device: str = "cpu") -> dict[str, pd.DataFrame]:
    """:func:`explain_pair`'s tables for every ``by`` in ``bys`` (``{by: frame}``), from one pass of the model."""
    run.check_head(layer, head)
    bys = tuple(bys)
    unknown = [by for by in bys if by not in BY]
    if unknown or not bys:
        raise QkvizError(f"by must be one of {', '.join(BY)}, got {unknown[0] if unknown else 'none'!r}")
    query, key = check_token(run, "query", query), check_token(run, "key", key)
    masked = masked_pair(run, layer, head, query, key)
    if masked is not None:
        raise QkvizError(masked)
    model = run_model(run, model, device, "attribution")
    query_names, query_parts, key_names, key_parts = split_vectors(run, model, layer, head, query, key)
    scale = run.scale(layer)
    tokens = run.tokens
    same_sequence = tokens.sentence.iat[query] == tokens.sentence.iat[key]
    slope = run.alibi_slope(layer, head)
    term = float(slope * (int(tokens.position.iat[key]) - int(tokens.position.iat[query]))) \
        if slope and same_sequence else 0.0
    q, k = query_parts.sum(axis=0), key_parts.sum(axis=0)
    frames = {}
    for by in bys:
        if by == "pair":
            frame = pair_split(query_names, query_parts, key_names, key_parts, scale, term)
        elif by == "query":
            frame = side_split(query_names, query_parts, k, scale, term)
        elif by == "key":
            frame = side_split(key_names, key_parts, q, scale, term)
        else:
            frame = dimension_split(q, k, scale, run.rotary(layer), term)
        frame.attrs.update(layer=layer, head=head, query=query, key=key, by=by, logit=float(scale * q @ k + term),
                           query_token=str(tokens.token.iat[query]), key_token=str(tokens.token.iat[key]),
                           softcap=run.softcap(layer))
        frames[by] = frame
    return frames
