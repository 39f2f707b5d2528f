"""The head atlas's statistics and logit decomposition as first written (before they were made fast, with
in-place work, kept probabilities and diagonals): a straightforward reference the fast code must equal up to
float rounding. Full ``[batch, query, key]`` arrays everywhere, ``np.sort`` for the top two weights, einsum for
every product, one masked softmax per term, the attention recomputed for the second pass."""

import numpy as np
import pandas as pd

from qkviz.analysis.statistics.head_stats import TIE_MARGIN, _Accumulator, _accumulate_patches, _finish
from qkviz.analysis.statistics.token_kinds import TokenKinds
from qkviz.analysis.logits.logit_decomposition import HeadDecomposition, available_terms, unrotate
from qkviz.core import LogitRule
from qkviz.core.attention import allowed_pairs


def masked_softmax(logits, allowed=None):
    if allowed is not None:
        logits = np.where(allowed, logits, -np.inf)
    top = logits.max(axis=-1, keepdims=True)
    weights = np.exp(logits - np.where(np.isfinite(top), top, 0.0))
    total = weights.sum(axis=-1, keepdims=True)
    return np.divide(weights, total, out=np.zeros_like(weights), where=total > 0)


def dot_logits(dots, scale, softcap=None):
    logits = np.asarray(dots, dtype=np.float64) * scale
    return np.tanh(logits / softcap) * softcap if softcap else logits


def mask_of(batch, causal, sliding_window):
    valid = batch.valid
    allowed = allowed_pairs(batch.rows.shape[1], LogitRule(1.0, causal=causal, window=sliding_window))
    return allowed[None] & valid[:, :, None] & valid[:, None, :]


def batch_attention(run, layer, head, batch):
    rows = np.maximum(batch.rows, 0)
    q, k = run.queries(layer, head)[rows].astype(np.float64), run.keys(layer, head)[rows].astype(np.float64)
    logits = dot_logits(q @ np.swapaxes(k, -1, -2), run.scale(layer), run.softcap(layer))
    return masked_softmax(logits, mask_of(batch, run.is_causal, run.sliding_window(layer)))


def head_statistics(run, layer, head, kinds, batches, max_offset, n_exemplars):
    width = max(batch.rows.shape[1] for batch in batches)
    sums = _Accumulator(max_offset, width)
    sums.position_sum = np.zeros((width, width))
    sums.position_count = np.zeros((width, width))    # the fast code counts the positions once per mask, apart
    moved = {"queries": 0, "first": 0.0, "special": 0.0}
    candidates = []
    for batch in batches:
        probs = batch_attention(run, layer, head, batch)
        mask = mask_of(batch, run.is_causal, run.sliding_window(layer))
        _accumulate(sums, batch, probs, mask, kinds)
        if run.has_output_norms:
            _accumulate_moved(moved, batch, probs, mask, kinds, run.output_norms(layer, head).astype(np.float64))
        candidates.append(_exemplar_candidates(batch, probs, mask, kinds, n_exemplars))
    mean_map = np.divide(sums.position_sum, sums.position_count, out=np.zeros_like(sums.position_sum),
                         where=sums.position_count > 0)
    deviation = 0.0
    for batch in batches:
        probs = batch_attention(run, layer, head, batch)
        mask = mask_of(batch, run.is_causal, run.sliding_window(layer))
        side = probs.shape[1]
        deviation += float(np.abs(probs - mean_map[None, :side, :side])[mask].sum())
    found = _finish(sums, deviation, pd.concat(candidates, ignore_index=True), n_exemplars)
    if run.has_output_norms:
        values = found.values
        first, special = moved["first"] / max(moved["queries"], 1), moved["special"] / max(moved["queries"], 1)
        values.update(first_token_value_share=first, special_value_share=special,
                      first_token_transmits=first / values["first_token_attention"]
                      if values["first_token_attention"] >= 1e-4 else float("nan"),
                      special_transmits=special / values["special_attention"]
                      if values["special_attention"] >= 1e-4 else float("nan"))
    return found


def _accumulate(sums, batch, probs, mask, kinds: TokenKinds) -> None:
    side = probs.shape[1]
    position = np.arange(side)
    offset = position[None, :] - position[:, None]
    queries = mask.any(axis=2)
    n_keys = mask.sum(axis=2)
    totals = sums.totals
    totals["queries"] += queries.sum()
    in_range = (np.abs(offset) <= sums.max_offset)[None] & mask
    bins = np.broadcast_to(offset + sums.max_offset, mask.shape)[in_range]
    sums.offset_weight += np.bincount(bins, probs[in_range], minlength=len(sums.offset_weight))
    sums.offset_count += np.bincount(bins, minlength=len(sums.offset_count))
    sums.position_sum[:side, :side] += probs.sum(axis=0)
    sums.position_count[:side, :side] += mask.sum(axis=0)
    if kinds.patch is None:
        distance = np.abs(offset)[None]
        totals["distance"] += float((probs * distance).sum())
        rest = probs[:, :, 1:].sum(axis=2)
        has_rest = queries & (mask[:, :, 1:].any(axis=2)) & (rest > 0)
        distance_rest = (probs[:, :, 1:] * distance[:, :, 1:]).sum(axis=2)
        totals["distance_no_first"] += float((distance_rest[has_rest] / rest[has_rest]).sum())
        totals["queries_no_first"] += has_rest.sum()
    logs = np.log(probs, out=np.zeros_like(probs), where=probs > 0)
    entropy = -(probs * logs).sum(axis=2)
    totals["entropy"] += float(entropy[queries].sum())
    multi = queries & (n_keys >= 2)
    totals["entropy_normalised"] += float((entropy[multi] / np.log(n_keys[multi])).sum())
    totals["queries_multi"] += multi.sum()
    top_two = np.sort(np.where(mask, probs, -1.0), axis=2)[:, :, -2:]
    margin = top_two[:, :, 1] - top_two[:, :, 0]
    totals["concentration"] += float(margin[multi].sum())
    totals["first_weight"] += float(probs[:, :, 0][queries].sum())
    rows = np.maximum(batch.rows, 0)
    special = kinds.special[rows] & batch.valid
    totals["special_weight"] += float((probs * special[:, None, :]).sum())
    decided = queries & ((n_keys == 1) | (margin > TIE_MARGIN))
    strongest = probs.argmax(axis=2)
    strongest_offset = strongest - position[None, :]
    totals["self"] += (decided & (strongest_offset == 0)).sum()
    if kinds.patch is None:
        totals["previous"] += (decided & (strongest_offset == -1)).sum()
        totals["next"] += (decided & (strongest_offset == 1)).sum()
    else:
        _accumulate_patches(sums, batch, probs, mask, kinds.patch, decided, strongest)
    totals["first"] += (decided & (strongest == 0)).sum()
    strongest_token = np.take_along_axis(rows, strongest, axis=1)
    totals["delimiter"] += (decided & (strongest > 0) & kinds.delimiter[strongest_token]).sum()
    near = decided & (np.abs(strongest_offset) <= sums.max_offset)
    sums.argmax_offset += np.bincount(strongest_offset[near] + sums.max_offset, minlength=len(sums.argmax_offset))


def _accumulate_moved(sums, batch, probs, mask, kinds, norms) -> None:
    """Value-weighted shares, sentence by sentence and query by query: each query's weights times its keys' output
    norms, the first token's and the special tokens' part of their sum."""
    for member, (rows, length) in enumerate(zip(batch.rows, batch.lengths)):
        rows = rows[:length]
        for query in range(length):
            if not mask[member, query].any():
                continue
            moved = probs[member, query, :length] * norms[rows]
            if moved.sum() <= 0:
                continue
            sums["queries"] += 1
            sums["first"] += moved[0] / moved.sum()
            sums["special"] += moved[kinds.special[rows]].sum() / moved.sum()


def _exemplar_candidates(batch, probs, mask, kinds, count):
    rows = np.maximum(batch.rows, 0)
    special = kinds.special[rows] | ~batch.valid
    usable = mask & ~special[:, None, :] & ~special[:, :, None]
    usable[:, :, 0] = False
    weights = np.where(usable, probs, -1.0).reshape(len(batch.sentences), -1)
    best = weights.argmax(axis=1)
    strongest = weights[np.arange(len(best)), best]
    keep = np.argsort(-strongest)[:count]
    keep = keep[strongest[keep] > 0]
    side = probs.shape[1]
    return pd.DataFrame({"sentence": batch.sentences[keep], "query": best[keep] // side,
                         "key": best[keep] % side, "weight": strongest[keep]})


def batch_terms(run, layer, head, batch):
    rows = np.maximum(batch.rows, 0)
    q = run.queries(layer, head)[rows].astype(np.float64)
    k = run.keys(layer, head)[rows].astype(np.float64)
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
        width = rows.shape[1]
        terms["key_prior"] = np.einsum("d,bkd->bk", query_bias.astype(np.float64), k)[:, None, :].repeat(width, axis=1)
        terms["query_constant"] = np.einsum("bqd,d->bq", q, key_bias.astype(np.float64))[:, :, None].repeat(width, axis=2)
        terms["bias_bias"] = np.full(q.shape[:2] + (width,), float(query_bias.astype(np.float64) @ key_bias.astype(np.float64)))
    terms["content"] = np.einsum("bqd,bkd->bqk", q, k)
    return terms


def embedding_terms(split, run, head, batch):
    rows = np.maximum(batch.rows, 0)
    query, key = split.projections(run, head, rows)
    product = lambda a, b: np.einsum("bqd,bkd->bqk", a, b)  # noqa: E731
    terms = {"token_token": product(query[0], key[0]), "token_position": product(query[0], key[1]),
             "position_token": product(query[1], key[0]), "position_position": product(query[1], key[1])}
    total = product(run.queries(0, head)[rows].astype(np.float64), run.keys(0, head)[rows].astype(np.float64))
    terms["embedding_other"] = total - sum(terms.values())
    return terms


def decompose(run, layer, batches, max_offset, terms, parts_of) -> HeadDecomposition:
    bins = 2 * max_offset + 1
    weight, count = np.zeros((len(terms), bins)), np.zeros(bins)
    covariance, variance = np.zeros(len(terms)), 0.0
    for batch in batches:
        mask = mask_of(batch, run.is_causal, run.sliding_window(layer))
        parts = parts_of(batch)
        side = mask.shape[1]
        offset = np.arange(side)[None, :] - np.arange(side)[:, None]
        in_range = (np.abs(offset) <= max_offset)[None] & mask
        offset_bins = np.broadcast_to(offset + max_offset, mask.shape)[in_range]
        count += np.bincount(offset_bins, minlength=bins)
        n_keys = mask.sum(axis=2, keepdims=True)
        multi = n_keys[..., 0] >= 2
        total = sum(parts[term] for term in terms)
        total_centred = np.where(mask, total - _masked_mean(total, mask, n_keys), 0.0)
        variance += float((total_centred ** 2).sum(axis=2)[multi].sum())
        for number, term in enumerate(terms):
            probs = masked_softmax(dot_logits(parts[term], run.scale(layer)), mask)
            weight[number] += np.bincount(offset_bins, probs[in_range], minlength=bins)
            centred = np.where(mask, parts[term] - _masked_mean(parts[term], mask, n_keys), 0.0)
            covariance[number] += float((centred * total_centred).sum(axis=2)[multi].sum())
    profiles = np.divide(weight, count, out=np.full_like(weight, np.nan), where=count > 0)
    return HeadDecomposition(terms, profiles, covariance / variance if variance > 0 else np.full(len(terms), np.nan))


def decompose_head(run, layer, head, batches, max_offset):
    return decompose(run, layer, batches, max_offset, available_terms(run),
                     lambda batch: batch_terms(run, layer, head, batch))


def _masked_mean(values, mask, n_keys):
    return np.where(mask, values, 0.0).sum(axis=2, keepdims=True) / np.maximum(n_keys, 1)

