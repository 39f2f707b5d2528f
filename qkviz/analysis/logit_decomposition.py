"""Splitting a head's attention logit into exact parts (Transformer-XL Fig. 7, attention-focus Fig. 2).

Where the run holds the model's rotary tables and / or query and key biases
(:mod:`qkviz.extraction.logit_parts_capture`), every logit ``q . k`` of a head is a sum of terms:

* rotary models: ``q . k = q0 . k0 + positional``, with ``q0``, ``k0`` the vectors before the
  rotation (recovered exactly by inverting the model's own rotation at each position) and
  ``positional`` what the rotation adds;
* models with biases: ``q0 = c_q + b_q`` and ``k0 = c_k + b_k``, so
  ``q0 . k0 = content (c_q . c_k) + key_prior (b_q . c_k: depends on the key only)
  + query_constant (c_q . b_k: constant for a query, cancelled by the softmax) + bias_bias``;
* otherwise the whole logit is ``content``.

For each term, over the corpus (attention batches as in :mod:`qkviz.analysis.head_stats`):
``profile``: the attention ``softmax(scale * term)`` would pay, averaged by relative position;
``variance_share``: ``sum_i cov_j(term, logit) / sum_i var_j(logit)`` over each query's keys, the
term's share of the logit's variation across keys (the shares add up to 1; a per-query constant
gets 0). Soft-capped models (Gemma 2) are decomposed before the cap; what a head adds beside ``q . k``
(ALiBi's distance bias, a sink logit: its :class:`~qkviz.core.logit_rule.LogitRule`) is no part of the split.

Absolute-position models (BERT, RoBERTa, DistilBERT, GPT-2) also get, at their first layer, the
split of each logit into token and position parts (:class:`EmbeddingSplit`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qkviz.analysis.attention_batches import SentenceBatch, batch_mask, workspace
from qkviz.core.attention import softmax_numerators
from qkviz.store.run import StoredRun

TERMS = ("content", "key_prior", "query_constant", "bias_bias", "positional", "content_and_position")
#: the one term of a run whose rotation qkviz does not invert (``qkviz.store.files.POSITION_UNSPLIT``)
UNSPLIT = "content_and_position"


def unrotate(vectors: np.ndarray, positions: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Undo the model's rotary embedding (the ``rotate_half`` convention, any scaling).

    ``vectors`` ``[..., d_head]`` at ``positions`` (same leading shape); ``cos`` and ``sin``
    ``[position, rotary_dim]`` as the layer applied them. Per pair ``(x1, x2)`` the model computed
    ``(x1 c - x2 s, x2 c + x1 s)``; this solves it for ``(x1, x2)``, dividing by ``c^2 + s^2``."""
    half = cos.shape[1] // 2
    c, s = cos[positions][..., :half], sin[positions][..., :half]
    e1, e2 = vectors[..., :half], vectors[..., half:2 * half]
    norm = c * c + s * s
    out = np.array(vectors, dtype=np.float64, copy=True)
    out[..., :half] = (c * e1 + s * e2) / norm
    out[..., half:2 * half] = (c * e2 - s * e1) / norm
    return out


def available_terms(run: StoredRun) -> tuple[str, ...]:
    """The terms this run can split its logits into (just ``content`` when it holds no parts)."""
    from qkviz.store import files as run_files

    if run.has_part(run_files.POSITION_UNSPLIT):
        return (UNSPLIT,)
    terms = ["content"]
    if run.has_part(run_files.QUERY_BIAS) and run.has_part(run_files.KEY_BIAS):
        terms += ["key_prior", "query_constant", "bias_bias"]
    if run.has_part(run_files.ROTARY_COS):
        terms.append("positional")
    return tuple(terms)


def batch_terms(run: StoredRun, layer: int, head: int, batch: SentenceBatch, queries: np.ndarray, keys: np.ndarray,
                reuse: bool = False) -> dict[str, np.ndarray]:
    """``{term: [batch, query, key]}`` float64 for one sentence batch; the terms add up to ``q . k``.
    ``reuse``: the products are written into :func:`~qkviz.analysis.attention_batches.workspace` arrays
    (overwritten by the next call)."""
    from qkviz.store import files as run_files

    rows = np.maximum(batch.rows, 0)
    q, k = queries[rows].astype(np.float64), keys[rows].astype(np.float64)
    if run.has_part(run_files.POSITION_UNSPLIT):
        return {UNSPLIT: _products(q, k, "decompose-content" if reuse else None)}
    terms = {}
    rotary = run.rotary(layer)
    if rotary is not None:
        positions = np.broadcast_to(np.arange(rows.shape[1]), rows.shape)
        terms["positional"] = _products(q, k, "decompose-positional" if reuse else None)
        q, k = unrotated = unrotate(q, positions, *rotary), unrotate(k, positions, *rotary)
    query_bias, key_bias = run.query_bias(layer, head), run.key_bias(layer, head)
    if query_bias is not None and key_bias is not None:
        query_bias, key_bias = query_bias.astype(np.float64), key_bias.astype(np.float64)
        q, k = q - query_bias, k - key_bias
        shape = q.shape[:2] + (rows.shape[1],)
        terms["key_prior"] = np.broadcast_to((k @ query_bias)[:, None, :], shape).copy()
        terms["query_constant"] = np.broadcast_to((q @ key_bias)[:, :, None], shape).copy()
        terms["bias_bias"] = np.full(shape, float(query_bias @ key_bias))
    terms["content"] = _products(q, k, "decompose-content" if reuse else None)
    if "positional" in terms:                            # what the rotation adds: q . k - q0 . k0
        terms["positional"] -= terms["content"] if "bias_bias" not in terms else _products(*unrotated)
    return {term: terms[term] for term in TERMS if term in terms}


def _products(a: np.ndarray, b: np.ndarray, into: str | None = None) -> np.ndarray:
    """``[batch, query, key]`` dot products of ``a`` ``[batch, query, d]`` and ``b`` ``[batch, key, d]``
    (``into``: in that workspace array)."""
    out = None if into is None else workspace(into, a.shape[:2] + b.shape[1:2])
    return np.matmul(a, np.swapaxes(b, -1, -2), out=out)


@dataclass
class HeadDecomposition:
    terms: tuple[str, ...]
    profiles: np.ndarray          # [term, 2 * max_offset + 1]: attention of the term alone by relative position
    variance_share: np.ndarray    # [term]


def decompose_head(run: StoredRun, layer: int, head: int, batches: list[SentenceBatch], max_offset: int
                   ) -> HeadDecomposition:
    """The bias / rotary split (:func:`batch_terms`) of one head over the corpus."""
    queries, keys = run.queries(layer, head), run.keys(layer, head)
    return _decompose(run, layer, head, batches, max_offset, available_terms(run),
                      lambda batch: batch_terms(run, layer, head, batch, queries, keys, reuse=True))


def decompose_embeddings(run: StoredRun, split: "EmbeddingSplit", head: int, batches: list[SentenceBatch],
                         max_offset: int) -> HeadDecomposition:
    """The token / position split (:class:`EmbeddingSplit`) of a first-layer head over the corpus."""
    queries, keys = run.queries(0, head), run.keys(0, head)
    return _decompose(run, 0, head, batches, max_offset, EMBEDDING_TERMS,
                      lambda batch: split.batch_terms(run, head, batch, queries, keys))


def _decompose(run: StoredRun, layer: int, head: int, batches: list[SentenceBatch], max_offset: int,
               terms: tuple[str, ...], parts_of) -> HeadDecomposition:
    """Shares and relative-position profiles of ``terms``; ``parts_of(batch)`` gives ``{term: [b, q, k]}``
    (arrays of its own, overwritten here)."""
    bins = 2 * max_offset + 1
    weight, count = np.zeros((len(terms), bins)), np.zeros(bins)
    covariance, variance = np.zeros(len(terms)), 0.0
    rule = run.logit_rule(layer, head)
    scale = rule.scale
    for batch in batches:
        mask = batch_mask(batch, rule)
        parts = parts_of(batch)
        side = mask.shape[1]
        offsets = range(max(-max_offset, 1 - side), min(max_offset, side - 1) + 1)
        for offset in offsets:
            count[offset + max_offset] += np.count_nonzero(np.diagonal(mask, offset, 1, 2))
        n_keys = mask.sum(axis=2, keepdims=True)
        multi = (n_keys[..., 0] >= 2)
        blocked = ~mask
        scratch = workspace("scratch", mask.shape)
        total = workspace("spare", mask.shape)
        np.copyto(total, parts[terms[0]])
        for term in terms[1:]:
            total += parts[term]
        total_centred = _centre(total, mask, n_keys, scratch)
        variance += float(np.multiply(total_centred, total_centred, out=scratch).sum(axis=2)[multi].sum())
        for number, term in enumerate(terms):
            part = parts.pop(term)
            # the profile: masked_softmax(dot_logits(term, scale)) (a term alone: never capped), on the diagonals
            # |offset| <= max_offset only
            weights = np.multiply(part, scale, out=scratch)
            np.copyto(weights, -np.inf, where=blocked)
            weights, norm = softmax_numerators(weights)
            norm = norm[..., 0]
            norm[~(norm > 0)] = np.inf                     # a query with no key: weights 0
            for offset in offsets:
                first = max(0, -offset)
                diagonal = np.diagonal(weights, offset, 1, 2) / norm[:, first:first + side - abs(offset)]
                weight[number, offset + max_offset] += diagonal.sum()
            # the share: sum over queries of the term's covariance with the logit over its keys
            centred = np.subtract(part, _masked_mean(part, mask, n_keys, scratch), out=part)
            centred *= total_centred                      # 0 where masked: total_centred is
            covariance[number] += float(centred.sum(axis=2)[multi].sum())
            del part, centred
    profiles = np.divide(weight, count, out=np.full_like(weight, np.nan), where=count > 0)
    shares = covariance / variance if variance > 0 else np.full(len(terms), np.nan)
    return HeadDecomposition(terms, profiles, shares)


EMBEDDING_TERMS = ("token_token", "token_position", "position_token", "position_position", "embedding_other")


@dataclass(frozen=True)
class EmbeddingSplit:
    """The first layer's queries and keys as token part + position part + the rest, exactly.

    The layer's input is ``x = LN(e_tok + e_pos + c)`` (``c`` the token-type row). With ``s`` the
    token's norm divisor ``sqrt(var(e) + eps)`` (fixed per token), the norm is linear in each part:
    ``x = g * center(e_tok) / s + g * center(e_pos) / s + (g * center(c) / s + b)``, and so are
    ``q = W_q x + b_q`` and ``k``. The terms ``q_tok . k_tok``, ``q_tok . k_pos``, ``q_pos . k_tok``,
    ``q_pos . k_pos`` are Transformer-XL's content / content-position / position-content /
    position-position terms; ``embedding_other`` holds the rest (token-type, norm bias, biases)."""

    token_ids: np.ndarray        # [used] sorted
    token_vectors: np.ndarray    # [used, d_model]
    position_vectors: np.ndarray  # [position, d_model]
    norm: np.ndarray             # [4, d_model]: token-type row, weight, bias, eps
    query_weight: np.ndarray     # [head, d_head, d_model]
    key_weight: np.ndarray       # [kv_head, d_head, d_model]

    @classmethod
    def of(cls, run: StoredRun) -> "EmbeddingSplit | None":
        from qkviz.store import files as run_files

        if not all(run.has_part(name) for name in run_files.EMBED_FILES):
            return None
        load = lambda name: np.asarray(run.part(name), dtype=np.float64)  # noqa: E731
        return cls(np.asarray(run.part(run_files.EMBED_TOKEN_IDS)), load(run_files.EMBED_TOKENS),
                   load(run_files.EMBED_POSITIONS), load(run_files.EMBED_NORM),
                   load(run_files.EMBED_QUERY_WEIGHT), load(run_files.EMBED_KEY_WEIGHT))

    def inputs(self, token_ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """``[3, ..., d_model]``: the token, position and remaining parts of the layer's input."""
        constant, weight, bias, eps = self.norm[0], self.norm[1], self.norm[2], self.norm[3, 0]
        token = self.token_vectors[np.searchsorted(self.token_ids, token_ids)]
        position = self.position_vectors[positions]
        total = token + position + constant
        divisor = np.sqrt(total.var(axis=-1, keepdims=True) + eps)
        centre = lambda v: v - v.mean(axis=-1, keepdims=True)  # noqa: E731
        rest = weight * centre(np.broadcast_to(constant, token.shape)) / divisor + bias
        return np.stack([weight * centre(token) / divisor, weight * centre(position) / divisor, rest])

    def projections(self, run: StoredRun, head: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``([3, ..., d_head], [3, ..., d_head])``: query and key parts of the tokens ``rows``
        (token, position, rest; the biases in the rest). They add up to the stored vectors."""
        tokens = run.tokens
        parts = self.inputs(tokens.token_id.to_numpy()[rows], tokens.position.to_numpy()[rows])
        query = parts @ self.query_weight[head].T
        key = parts @ self.key_weight[run.kv_head(head)].T
        query[2] += run.query_bias(0, head)
        key[2] += run.key_bias(0, head)
        return query, key

    def batch_terms(self, run: StoredRun, head: int, batch: SentenceBatch, queries: np.ndarray, keys: np.ndarray
                    ) -> dict[str, np.ndarray]:
        """``{term: [batch, query, key]}``; ``embedding_other`` is the stored logit minus the four."""
        rows = np.maximum(batch.rows, 0)
        query, key = self.projections(run, head, rows)
        terms = {"token_token": _products(query[0], key[0]), "token_position": _products(query[0], key[1]),
                 "position_token": _products(query[1], key[0]), "position_position": _products(query[1], key[1])}
        total = _products(queries[rows].astype(np.float64), keys[rows].astype(np.float64))
        terms["embedding_other"] = total - sum(terms.values())
        return terms


def _masked_mean(values: np.ndarray, mask: np.ndarray, n_keys: np.ndarray, scratch: np.ndarray | None = None
                 ) -> np.ndarray:
    """``[batch, query, 1]``: the mean of ``values`` over each query's allowed keys (``scratch``: a spare array of
    their shape)."""
    return np.multiply(values, mask, out=scratch).sum(axis=2, keepdims=True) / np.maximum(n_keys, 1)


def _centre(values: np.ndarray, mask: np.ndarray, n_keys: np.ndarray, scratch: np.ndarray) -> np.ndarray:
    """``values`` minus each query's :func:`_masked_mean`, 0 where masked, in place."""
    values -= _masked_mean(values, mask, n_keys, scratch)
    values *= mask
    return values
