"""Splitting a head's attention logit into exact parts (Transformer-XL Fig. 7, attention-focus Fig. 2).

Where the run holds the model's rotary tables and / or query and key biases
(:mod:`qkviz.logit_parts_capture`), every logit ``q . k`` of a head is a sum of terms:

* rotary models: ``q . k = q0 . k0 + positional``, with ``q0``, ``k0`` the vectors before the
  rotation (recovered exactly by inverting the model's own rotation at each position) and
  ``positional`` what the rotation adds;
* models with biases: ``q0 = c_q + b_q`` and ``k0 = c_k + b_k``, so
  ``q0 . k0 = content (c_q . c_k) + key_prior (b_q . c_k: depends on the key only)
  + query_constant (c_q . b_k: constant for a query, cancelled by the softmax) + bias_bias``;
* otherwise the whole logit is ``content``.

For each term, over the corpus (attention batches as in :mod:`qkviz.head_stats`):
``profile``: the attention ``softmax(scale * term)`` would pay, averaged by relative position;
``variance_share``: ``sum_i cov_j(term, logit) / sum_i var_j(logit)`` over each query's keys, the
term's share of the logit's variation across keys (the shares add up to 1; a per-query constant
gets 0). Soft-capped models (Gemma 2) are decomposed before the cap.

Absolute-position models (BERT, GPT-2) need the token and position embeddings for the same split
at their first layer; that is not captured, so for them only the bias terms are given.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qkviz.attention_batches import SentenceBatch, batch_mask, masked_softmax
from qkviz.run import Run

TERMS = ("content", "key_prior", "query_constant", "bias_bias", "positional")


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


def available_terms(run: Run) -> tuple[str, ...]:
    """The terms this run can split its logits into (just ``content`` when it holds no parts)."""
    from qkviz import run_files

    terms = ["content"]
    if run.has_part(run_files.QUERY_BIAS) and run.has_part(run_files.KEY_BIAS):
        terms += ["key_prior", "query_constant", "bias_bias"]
    if run.has_part(run_files.ROTARY_COS):
        terms.append("positional")
    return tuple(terms)


def batch_terms(run: Run, layer: int, head: int, batch: SentenceBatch, queries: np.ndarray, keys: np.ndarray
                ) -> dict[str, np.ndarray]:
    """``{term: [batch, query, key]}`` float64 for one sentence batch; the terms add up to ``q . k``."""
    rows = np.maximum(batch.rows, 0)
    q, k = queries[rows].astype(np.float64), keys[rows].astype(np.float64)
    terms = {}
    rotary = run.rotary(layer)
    if rotary is not None:
        positions = np.broadcast_to(np.arange(rows.shape[1]), rows.shape)
        total = np.einsum("bqd,bkd->bqk", q, k)
        q, k = unrotate(q, positions, *rotary), unrotate(k, positions, *rotary)
        terms["positional"] = total - np.einsum("bqd,bkd->bqk", q, k)
    query_bias, key_bias = run.query_bias(layer, head), run.key_bias(layer, head)
    if query_bias is not None and key_bias is not None:
        q, k = q - query_bias, k - key_bias
        terms["key_prior"] = np.einsum("d,bkd->bk", query_bias.astype(np.float64), k)[:, None, :].repeat(
            rows.shape[1], axis=1)
        terms["query_constant"] = np.einsum("bqd,d->bq", q, key_bias.astype(np.float64))[:, :, None].repeat(
            rows.shape[1], axis=2)
        terms["bias_bias"] = np.full(q.shape[:2] + (rows.shape[1],), float(query_bias.astype(np.float64) @ key_bias.astype(np.float64)))
    terms["content"] = np.einsum("bqd,bkd->bqk", q, k)
    return {term: terms[term] for term in TERMS if term in terms}


@dataclass
class HeadDecomposition:
    terms: tuple[str, ...]
    profiles: np.ndarray          # [term, 2 * max_offset + 1]: attention of the term alone by relative position
    variance_share: np.ndarray    # [term]


def decompose_head(run: Run, layer: int, head: int, batches: list[SentenceBatch], max_offset: int
                   ) -> HeadDecomposition:
    queries, keys = run.queries(layer, head), run.keys(layer, head)
    terms = available_terms(run)
    bins = 2 * max_offset + 1
    weight, count = np.zeros((len(terms), bins)), np.zeros(bins)
    covariance, variance = np.zeros(len(terms)), 0.0
    scale = run.scale(layer)
    for batch in batches:
        mask = batch_mask(batch, run.is_causal, run.sliding_window(layer))
        parts = batch_terms(run, layer, head, batch, queries, keys)
        side = mask.shape[1]
        offset = np.arange(side)[None, :] - np.arange(side)[:, None]
        in_range = (np.abs(offset) <= max_offset)[None] & mask
        offset_bins = np.broadcast_to(offset + max_offset, mask.shape)[in_range]
        count += np.bincount(offset_bins, minlength=bins)
        n_keys = mask.sum(axis=2, keepdims=True)
        multi = (n_keys[..., 0] >= 2)
        total = sum(parts.values())
        total_centred = np.where(mask, total - _masked_mean(total, mask, n_keys), 0.0)
        variance += float((total_centred ** 2).sum(axis=2)[multi].sum())
        for number, term in enumerate(terms):
            probs = masked_softmax(scale * parts[term], mask)
            weight[number] += np.bincount(offset_bins, probs[in_range], minlength=bins)
            centred = np.where(mask, parts[term] - _masked_mean(parts[term], mask, n_keys), 0.0)
            covariance[number] += float((centred * total_centred).sum(axis=2)[multi].sum())
    profiles = np.divide(weight, count, out=np.full_like(weight, np.nan), where=count > 0)
    shares = covariance / variance if variance > 0 else np.full(len(terms), np.nan)
    return HeadDecomposition(terms, profiles, shares)


def _masked_mean(values: np.ndarray, mask: np.ndarray, n_keys: np.ndarray) -> np.ndarray:
    return np.where(mask, values, 0.0).sum(axis=2, keepdims=True) / np.maximum(n_keys, 1)
