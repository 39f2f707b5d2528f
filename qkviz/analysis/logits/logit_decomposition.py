"""Splitting a head's attention logit into exact parts (Transformer-XL Fig. 7, attention-focus Fig. 2).

Where the run holds the model's rotary tables and / or query and key biases
(:mod:`qkviz.extraction.streaming.logit_parts_capture`), every logit ``q . k`` of a head is a sum of terms:

* rotary models: ``q . k = q0 . k0 + positional``, with ``q0``, ``k0`` the vectors before the
  rotation (recovered exactly by inverting the model's own rotation at each position) and
  ``positional`` what the rotation adds;
* models with biases: ``q0 = c_q + b_q`` and ``k0 = c_k + b_k``, so
  ``q0 . k0 = content (c_q . c_k) + key_prior (b_q . c_k: depends on the key only)
  + query_constant (c_q . b_k: constant for a query, cancelled by the softmax) + bias_bias``;
* otherwise the whole logit is ``content``.

For each term, over the corpus (attention batches as in :mod:`qkviz.analysis.statistics.head_stats`):
``profile``: the attention ``softmax(scale * term)`` would pay, averaged by relative position;
``variance_share``: ``sum_i cov_j(term, logit) / sum_i var_j(logit)`` over each query's keys, the
term's share of the logit's variation across keys (the shares add up to 1; a per-query constant
gets 0). Soft-capped models (Gemma 2) are decomposed before the cap; what a head adds beside ``q . k``
(ALiBi's distance bias, a sink logit: its :class:`~qkviz.core.logit_rule.LogitRule`) is no part of the split.

Absolute-position models (BERT, RoBERTa, DistilBERT, GPT-2) also get, at their first layer, the
split of each logit into token and position parts (:class:`EmbeddingSplit`).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

import numpy as np

from qkviz.analysis.statistics.attention_batches import SentenceBatch, batch_mask, workspace
from qkviz.core.attention import softmax_numerators
from qkviz.core.logit_rule import LogitRule
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
    ``reuse``: the products are written into :func:`~qkviz.analysis.statistics.attention_batches.workspace` arrays
    (overwritten by the next call)."""
    side = batch.rows.shape[1]
    return batch_blocks(run, layer, head, batch, queries, keys)(slice(0, side), slice(0, side), np.float64, reuse)


#: a function of (query rows, keys, dtype, reuse) giving ``{term: [batch, rows, keys]}`` of one batch
BlockTerms = Callable[[slice, slice, type, bool], dict[str, np.ndarray]]


def batch_blocks(run: StoredRun, layer: int, head: int, batch: SentenceBatch, queries: np.ndarray, keys: np.ndarray
                 ) -> BlockTerms:
    """The terms of :func:`batch_terms` for any block of the batch (a slice of its query rows x a slice of its keys), in
    any float ``dtype``: the per-token vectors (unrotated, the biases taken off) are made here once, in float64; a
    block's products of them in ``dtype``. ``reuse``: into workspace arrays, overwritten by the next call."""
    from qkviz.store import files as run_files

    rows = np.maximum(batch.rows, 0)
    q, k = queries[rows].astype(np.float64), keys[rows].astype(np.float64)
    if run.has_part(run_files.POSITION_UNSPLIT):
        return lambda at, to, dtype, reuse=False: {UNSPLIT: _products(q[:, at], k[:, to], dtype,
                                                                      "decompose-content" if reuse else None)}
    stored = q, k
    rotary = run.rotary(layer)
    if rotary is not None:
        positions = np.broadcast_to(np.arange(rows.shape[1]), rows.shape)
        q, k = unrotate(q, positions, *rotary), unrotate(k, positions, *rotary)
    unrotated = q, k
    query_bias, key_bias = run.query_bias(layer, head), run.key_bias(layer, head)
    biased = query_bias is not None and key_bias is not None
    if biased:
        query_bias, key_bias = query_bias.astype(np.float64), key_bias.astype(np.float64)
        q, k = q - query_bias, k - key_bias
        key_prior, query_constant, bias_bias = k @ query_bias, q @ key_bias, float(query_bias @ key_bias)

    def block(at: slice, to: slice, dtype: type, reuse: bool = False) -> dict[str, np.ndarray]:
        into = (lambda name: f"decompose-{name}") if reuse else (lambda name: None)  # noqa: E731
        terms = {"content": _products(q[:, at], k[:, to], dtype, into("content"))}
        shape = terms["content"].shape
        if biased:
            terms["key_prior"] = _filled(key_prior[:, None, to], shape, dtype, into("key_prior"))
            terms["query_constant"] = _filled(query_constant[:, at, None], shape, dtype, into("query_constant"))
            terms["bias_bias"] = _filled(bias_bias, shape, dtype, into("bias_bias"))
        if rotary is not None:                           # what the rotation adds: q . k - q0 . k0
            positional = _products(stored[0][:, at], stored[1][:, to], dtype, into("positional"))
            positional -= (terms["content"] if not biased
                           else _products(unrotated[0][:, at], unrotated[1][:, to], dtype, into("unrotated")))
            terms["positional"] = positional
        return {term: terms[term] for term in TERMS if term in terms}

    return block


def _products(a: np.ndarray, b: np.ndarray, dtype: type = np.float64, into: str | None = None) -> np.ndarray:
    """``[batch, query, key]`` dot products in ``dtype`` of ``a`` ``[batch, query, d]`` and ``b`` ``[batch, key, d]``
    (``into``: in that workspace array)."""
    out = None if into is None else workspace(into, a.shape[:2] + b.shape[1:2], dtype)
    return np.matmul(a.astype(dtype, copy=False), np.swapaxes(b.astype(dtype, copy=False), -1, -2), out=out)


def _filled(values: np.ndarray | float, shape: tuple[int, ...], dtype: type, into: str | None = None) -> np.ndarray:
    """``values`` broadcast to ``shape`` in an array of its own (``into``: that workspace array)."""
    out = np.empty(shape, dtype) if into is None else workspace(into, shape, dtype)
    np.copyto(out, values, casting="unsafe")
    return out


@dataclass
class HeadDecomposition:
    terms: tuple[str, ...]
    profiles: np.ndarray          # [term, 2 * max_offset + 1]: attention of the term alone by relative position
    variance_share: np.ndarray    # [term]


#: cells (sentence x query x key) of one block of the decomposition: each batch is split into blocks of its query
#: rows (one row at least) of at most this many cells, over the keys those rows may attend to only
BLOCK_CELLS = 1 << 18
#: how far the float32 block-wise profiles (relative) and shares (absolute: parts of 1) may be from the float64
#: computation over whole batches
FLOAT32_BOUND = 1e-5


def decompose_head(run: StoredRun, layer: int, head: int, batches: list[SentenceBatch], max_offset: int,
                   block_cells: int = BLOCK_CELLS) -> HeadDecomposition:
    """The bias / rotary split (:func:`batch_terms`) of one head over the corpus."""
    queries, keys = run.queries(layer, head), run.keys(layer, head)
    return _decompose(run, layer, head, batches, max_offset, available_terms(run),
                      lambda batch: batch_blocks(run, layer, head, batch, queries, keys), block_cells)


def decompose_embeddings(run: StoredRun, split: "EmbeddingSplit", head: int, batches: list[SentenceBatch],
                         max_offset: int, block_cells: int = BLOCK_CELLS) -> HeadDecomposition:
    """The token / position split (:class:`EmbeddingSplit`) of a first-layer head over the corpus."""
    queries, keys = run.queries(0, head), run.keys(0, head)
    return _decompose(run, 0, head, batches, max_offset, EMBEDDING_TERMS,
                      lambda batch: split.batch_blocks(run, head, batch, queries, keys), block_cells)


def _decompose(run: StoredRun, layer: int, head: int, batches: list[SentenceBatch], max_offset: int,
               terms: tuple[str, ...], blocks_of: Callable[[SentenceBatch], BlockTerms], block_cells: int
               ) -> HeadDecomposition:
    """Shares and relative-position profiles of ``terms``; ``blocks_of(batch)`` gives the batch's :data:`BlockTerms`
    (arrays of their own, overwritten here).

    Block by block (:data:`BLOCK_CELLS`): a block's terms, softmax and centred products are float32 over the keys its
    query rows may attend to (the masked pairs would add exactly 0); its sums are added up in float64. Each query's
    mean of a term over its keys is a float64 sum, so a term constant for a query (``query_constant``, ``bias_bias``)
    centres to exactly 0. The results are within 1e-5 of the float64 computation over the whole batch (a test checks)."""
    bins = 2 * max_offset + 1
    weight, count = np.zeros((len(terms), bins)), np.zeros(bins)
    covariance, variance = np.zeros(len(terms)), 0.0
    rule = run.logit_rule(layer, head)
    scale = rule.scale
    for batch in batches:
        mask = batch_mask(batch, rule)
        block_terms = blocks_of(batch)
        batch_count, blocks = _blocks(batch, rule, mask, block_cells, max_offset)
        count += batch_count
        for block in blocks:
            rows, cols, offset_bin, n_keys, multi = block.rows, block.cols, block.offset_bin, block.n_keys, block.multi
            block_mask = mask[:, block.at, block.to]
            parts = block_terms(block.at, block.to, np.float32, True)
            blocked = ~block_mask
            scratch = workspace("decompose-scratch", block_mask.shape, np.float32)
            total = workspace("decompose-total", block_mask.shape, np.float32)
            np.copyto(total, parts[terms[0]])
            for term in terms[1:]:
                total += parts[term]
            total_centred = _centre(total, block_mask, n_keys, scratch)
            variance += float(np.multiply(total_centred, total_centred, out=scratch).sum(axis=2, dtype=np.float64)
                              [multi].sum())
            for number, term in enumerate(terms):
                part = parts.pop(term)
                # the profile: masked_softmax(dot_logits(term, scale)) (a term alone: never capped), on the diagonals
                # |offset| <= max_offset only
                weights = np.multiply(part, scale, out=scratch)
                np.copyto(weights, -np.inf, where=blocked)
                weights, norm = softmax_numerators(weights)
                norm = norm[..., 0]
                norm[~(norm > 0)] = np.inf                     # a query with no key: weights 0
                on_band = (weights[:, rows, cols] / norm[:, rows]).sum(axis=0, dtype=np.float64)
                weight[number] += np.bincount(offset_bin, on_band, minlength=bins)
                # the share: sum over queries of the term's covariance with the logit over its keys
                centred = np.subtract(part, _masked_mean(part, block_mask, n_keys, scratch), out=part)
                centred *= total_centred                      # 0 where masked: total_centred is
                covariance[number] += float(centred.sum(axis=2, dtype=np.float64)[multi].sum())
                del part, centred
    profiles = np.divide(weight, count, out=np.full_like(weight, np.nan), where=count > 0)
    shares = covariance / variance if variance > 0 else np.full(len(terms), np.nan)
    return HeadDecomposition(terms, profiles, shares)


@dataclass(frozen=True)
class _Block:
    """A block of query rows of a batch over their keys, and what its mask gives every head of the mask."""

    at: slice                 # its query rows
    to: slice                 # the keys they may attend to (from the first to the last)
    rows: np.ndarray          # the cells within max_offset of the diagonal: row, column, offset bin (offset + max_offset)
    cols: np.ndarray
    offset_bin: np.ndarray
    n_keys: np.ndarray        # int [sentence, row, 1]: each query's keys
    multi: np.ndarray         # bool [sentence, row]: a query with two keys or more


def _blocks(batch: SentenceBatch, rule: LogitRule, mask: np.ndarray, block_cells: int, max_offset: int
            ) -> tuple[np.ndarray, list[_Block]]:
    """The batch's blocks of at most ``block_cells`` cells (one query row at least), and the number of allowed pairs
    at each offset (``[2 * max_offset + 1]``); made once per mask (its batch and rule) and kept for the next heads, up
    to :data:`BLOCK_CACHE_ITEMS` index entries."""
    key = (id(batch), rule.causal, rule.window, rule.chunk, block_cells, max_offset)
    if key in _BLOCKS:
        _BLOCKS.move_to_end(key)
        return _BLOCKS[key][1]
    sentences, side = mask.shape[:2]
    step = max(1, block_cells // max(sentences * side, 1))
    count, blocks = np.zeros(2 * max_offset + 1), []
    for start in range(0, side, step):
        stop = min(side, start + step)
        used = mask[:, start:stop].any(axis=(0, 1))          # the keys of these queries
        if not used.any():
            continue
        first, last = int(used.argmax()), side - int(used[::-1].argmax())
        block_mask = mask[:, start:stop, first:last]
        rows, cols, offset_bin = _band(stop - start, last - first, first - start, max_offset)
        count += np.bincount(offset_bin, block_mask[:, rows, cols].sum(axis=0), minlength=count.size)
        n_keys = block_mask.sum(axis=2, keepdims=True)
        blocks.append(_Block(slice(start, stop), slice(first, last), rows, cols, offset_bin, n_keys, n_keys[..., 0] >= 2))
    _BLOCKS[key] = (batch, (count, blocks))        # the batch held with its blocks: its id stays its own
    while len(_BLOCKS) > 1 and sum(_size(found) for _, found in _BLOCKS.values()) > BLOCK_CACHE_ITEMS:
        _BLOCKS.popitem(last=False)
    return count, blocks


def _size(found: tuple[np.ndarray, list[_Block]]) -> int:
    return sum(3 * block.rows.size + block.n_keys.size for block in found[1])


#: index entries of the blocks :func:`_blocks` keeps for the next heads
BLOCK_CACHE_ITEMS = 1 << 23
#: (id of the batch, causal, window, chunk, block cells, max offset) -> (batch, (count, blocks)), least recent first
_BLOCKS: OrderedDict[tuple, tuple[SentenceBatch, tuple[np.ndarray, list[_Block]]]] = OrderedDict()


def forget_blocks() -> None:
    """Drop the blocks :func:`_blocks` keeps (and the batches they hold)."""
    _BLOCKS.clear()


def _band(rows: int, keys: int, shift: int, max_offset: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The cells of a ``[rows, keys]`` block (key ``c`` is ``shift + c - r`` tokens from query row ``r``) within
    ``max_offset`` of the diagonal: their row, column and offset bin (``offset + max_offset``)."""
    row = np.arange(rows)[:, None]
    offset = np.arange(-max_offset, max_offset + 1)[None, :]
    col = row + offset - shift
    inside = (col >= 0) & (col < keys)
    return np.broadcast_to(row, inside.shape)[inside], col[inside], np.broadcast_to(offset + max_offset, inside.shape)[inside]


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
        """``{term: [batch, query, key]}`` float64; ``embedding_other`` is the stored logit minus the four."""
        side = batch.rows.shape[1]
        return self.batch_blocks(run, head, batch, queries, keys)(slice(0, side), slice(0, side), np.float64)

    def batch_blocks(self, run: StoredRun, head: int, batch: SentenceBatch, queries: np.ndarray, keys: np.ndarray
                     ) -> BlockTerms:
        """The terms of :meth:`batch_terms` for any block of the batch, in any float dtype (as :func:`batch_blocks`)."""
        rows = np.maximum(batch.rows, 0)
        query, key = self.projections(run, head, rows)
        stored = queries[rows].astype(np.float64), keys[rows].astype(np.float64)

        def block(at: slice, to: slice, dtype: type, reuse: bool = False) -> dict[str, np.ndarray]:
            into = (lambda name: f"decompose-{name}") if reuse else (lambda name: None)  # noqa: E731
            terms = {f"{a_name}_{b_name}": _products(query[a][:, at], key[b][:, to], dtype, into(f"{a_name}_{b_name}"))
                     for a, a_name in enumerate(("token", "position")) for b, b_name in enumerate(("token", "position"))}
            other = _products(stored[0][:, at], stored[1][:, to], dtype, into("embedding_other"))
            for term in terms.values():
                other -= term
            terms["embedding_other"] = other
            return terms

        return block


def _masked_mean(values: np.ndarray, mask: np.ndarray, n_keys: np.ndarray, scratch: np.ndarray | None = None
                 ) -> np.ndarray:
    """``[batch, query, 1]``: the mean of ``values`` over each query's allowed keys, summed in float64, in the dtype of
    ``values`` (``scratch``: a spare array of their shape)."""
    total = np.multiply(values, mask, out=scratch).sum(axis=2, keepdims=True, dtype=np.float64)
    return (total / np.maximum(n_keys, 1)).astype(values.dtype, copy=False)


def _centre(values: np.ndarray, mask: np.ndarray, n_keys: np.ndarray, scratch: np.ndarray) -> np.ndarray:
    """``values`` minus each query's :func:`_masked_mean`, 0 where masked, in place."""
    values -= _masked_mean(values, mask, n_keys, scratch)
    values *= mask
    return values
