"""Per-head attention statistics over the whole corpus (numpy only), after the seed papers.

Attention is recomputed from the stored vectors (:mod:`qkviz.analysis.statistics.attention_batches`). For a head,
with ``a[x, i, j]`` the attention of query ``i`` to key ``j`` in sentence ``x`` (positions within
the sentence), ``A(x, i)`` the keys query ``i`` may attend to, and ``N`` the number of queries:

* ``relative_position[o]`` (Transformer-XL, App. D): the mean of ``a[x, i, i + o]`` over every
  query that may attend to offset ``o``, for ``|o| <= max_offset``;
* ``offset_support[:, o]`` (what a positional label rests on, :data:`OFFSET_SUPPORT_ROWS`): how many queries may attend
  to offset ``o``, how many of them have there a key other than the first token (``i + o > 0``), and the mean of
  ``a[x, i, i + o]`` over those (the first token left out: a sink at the first token is no attention at an offset);
* ``mean_distance`` (Vig & Belinkov): ``sum a[x, i, j] |i - j| / N``; ``mean_distance_no_first``
  the same with the first token's weight removed and each query's rest renormalised (queries with
  no other key left out);
* ``entropy``: the mean over queries of ``-sum_j a log a`` (nats); ``entropy_normalised`` divides
  each query's by ``log |A(x, i)|`` (queries with one key left out): 1 is uniform;
* ``variability`` (Vig & Belinkov): ``sum |a[x, i, j] - mean_x a[., i, j]| / (2 sum a)``, the mean
  over the sentences that have positions ``i`` and ``j``: 0 when attention depends only on
  positions, towards 1 when it depends on content;
* ``argmax_self``, ``argmax_first``, ``argmax_previous``, ``argmax_next``, ``argmax_delimiter``
  (attention-focus plots): the share of queries whose strongest key is itself, the first token,
  the previous token, the next one (encoders; 0 for decoders), a special or punctuation token
  other than the first token (so a [CLS] head counts as first-token, a [SEP] head as delimiter);
  ``argmax_offset`` the share at the most frequent fixed offset ``|o| >= 2`` and ``offset`` that offset
  (a query whose top two weights are within ``TIE_MARGIN`` has no strongest key and counts for none);
* ``concentration``: the mean over queries with at least two keys of top-1 minus top-2 weight;
* ``first_token_attention`` and ``special_attention``: the mean weight a query gives the first
  token, and special tokens ([CLS], [SEP], <s>, ...).

Runs with output norms add the value-weighted shares of :mod:`qkviz.analysis.statistics.value_shares` (``VALUE_STATISTICS``).

Exemplars (Vig & Belinkov): the sentences holding the strongest weights, ignoring keys that are
the first token or special, and special queries, one pair per sentence.

Image runs (:attr:`qkviz.store.StoredRun.is_image_run`: a "sentence" is an image, its tokens the special
tokens then the patches, row by row) measure place on the patch grid rather than in the sequence, over
patch queries only (the special tokens have no place):

* ``mean_distance``: ``sum a[x, i, j] d(i, j)`` over patch keys, with ``d`` the Euclidean distance
  between the two patches' (row, column), in patches; the weight on special tokens adds nothing.
  ``mean_distance_no_first`` renormalises each query's patch weights (all special tokens left out);
* ``argmax_previous`` / ``argmax_next``: the strongest key is the patch to the left / right in the same
  row (the sequence's previous token, without wrapping to the row above);
* :data:`IMAGE_STATISTICS`: ``argmax_neighbour`` (one of the 4 adjacent patches), ``argmax_same_row``
  and ``argmax_same_col`` (a patch 2 or more away in the same row / column).

``argmax_first`` and ``first_token_attention`` are about the first token, CLS (a patch for SigLIP, which
has none); ``argmax_delimiter`` and ``special_attention`` about the other special tokens (distillation
token, registers). The relative-position profile and ``offset`` stay sequence offsets (a patch ``cols``
away in the sequence is the one below). Part of speech and dependencies have no meaning there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from qkviz.analysis.statistics.batch_memo import BatchMemo
from qkviz.analysis.statistics.registry import EVERY_RUN, IMAGE_RUNS, statistic_names
from qkviz.analysis.statistics.attention_batches import (SentenceBatch, batch_attention, batch_mask, key_spans, sentence_batches,
                                              workspace)
from qkviz.core.logit_rule import LogitRule
from qkviz.store.run import StoredRun
from qkviz.analysis.statistics.syntax import BatchSyntax, SyntaxSums
from qkviz.analysis.statistics.token_kinds import TokenKinds
from qkviz.analysis.statistics.value_shares import ValueShares

DEFAULT_MAX_OFFSET = 64
TIE_MARGIN = 1e-6
#: the rows of :attr:`HeadStatistics.offset_support`, per offset: the queries that may attend there, those whose key
#: there is not the first token, and their mean attention there
OFFSET_SUPPORT_ROWS = ("queries", "queries_no_first", "attention_no_first")
#: every run's statistics, declared in qkviz.analysis.statistics.registry
STATISTICS = statistic_names(EVERY_RUN)
#: image runs only: where on the patch grid the strongest key of a patch query is
IMAGE_STATISTICS = statistic_names(IMAGE_RUNS)


@dataclass
class HeadStatistics:
    """One head's statistics (``STATISTICS``), relative-position profile and exemplars."""

    values: dict[str, float]
    relative_position: np.ndarray   # float64 [2 * max_offset + 1], offset -max_offset first; NaN where unseen
    exemplars: pd.DataFrame         # sentence, query, key (positions), weight
    #: float64 [OFFSET_SUPPORT_ROWS, 2 * max_offset + 1]: per offset its queries, those whose key there is not the
    #: first token, and their mean attention there (NaN where none)
    offset_support: np.ndarray | None = None


class _Accumulator:
    """Sums over batches of one head; :meth:`finish` turns them into the statistics."""

    def __init__(self, max_offset: int, max_width: int):
        self.max_offset = max_offset
        self.offset_weight = np.zeros(2 * max_offset + 1)
        self.offset_count = np.zeros(2 * max_offset + 1)
        self.first_weight = np.zeros(2 * max_offset + 1)     # the weight and count of offset o's first-token keys
        self.first_count = np.zeros(2 * max_offset + 1)
        self.argmax_offset = np.zeros(2 * max_offset + 1)
        self.position_sum = workspace("stats-position-sum", (max_width, max_width))
        self.position_sum.fill(0.0)
        self.totals: dict[str, float] = dict.fromkeys(
            ("queries", "distance", "distance_no_first", "queries_no_first", "entropy", "entropy_normalised",
             "queries_multi", "first", "previous", "next", "self", "delimiter", "concentration",
             "first_weight", "special_weight", "patch_queries", "neighbour", "same_row", "same_col"), 0.0)
        self.image = False


#: bytes of one head's attention probabilities kept from the first pass for the second (variability) one;
#: the batches beyond it are recomputed
PROBS_CACHE_BYTES = 512 << 20


def head_statistics(run: StoredRun, layer: int, head: int, kinds: TokenKinds | None = None,
                    batches: list[SentenceBatch] | None = None, max_offset: int = DEFAULT_MAX_OFFSET,
                    n_exemplars: int = 5, syntax: list[BatchSyntax] | None = None,
                    cache_bytes: int = PROBS_CACHE_BYTES, observers: list | None = None) -> HeadStatistics:
    """Every statistic of the module docstring for one head, in two passes over its attention (the second
    reuses the first's probabilities of up to ``cache_bytes``, and recomputes the rest).

    With ``syntax`` (one :class:`qkviz.analysis.statistics.syntax.BatchSyntax` per batch of ``batches``) the values
    also hold :data:`qkviz.analysis.statistics.syntax.SYNTAX_STATISTICS`; where the run has output norms, they hold
    :data:`qkviz.analysis.statistics.value_shares.VALUE_STATISTICS`. Each of ``observers`` sees every batch's attention as
    ``observer.add(batch number, probs, mask)`` (:class:`qkviz.analysis.statistics.induction_scores.RepeatSums`)."""
    kinds = TokenKinds.of(run) if kinds is None else kinds
    batches = sentence_batches(run) if batches is None else batches
    width = max(batch.rows.shape[1] for batch in batches)
    sums = _Accumulator(max_offset, width)
    syntax_sums = SyntaxSums()
    candidates = []
    queries, keys = run.queries(layer, head), run.keys(layer, head)
    moved = (ValueShares(run.output_norms(layer, head).astype(np.float64), kinds.special) if run.has_output_norms
             else None)
    kept: dict[int, np.ndarray] = {}
    room = cache_bytes
    for number, batch in enumerate(batches):
        shape = _cells(batch)
        keep = 8 * int(np.prod(shape)) <= room
        room -= 8 * int(np.prod(shape)) if keep else 0
        probs = batch_attention(run, layer, head, batch, queries, keys,
                                out=workspace(f"stats-probs-{number}" if keep else "spare", shape))
        mask = batch_mask(batch, run.logit_rule(layer, head))
        scratch = workspace("scratch", shape)
        _accumulate(sums, batch, probs, mask, kinds, scratch)
        if moved is not None:
            moved.add(batch, probs, mask)
        candidates.append(_exemplar_candidates(batch, probs, mask, kinds, n_exemplars, scratch))
        if syntax is not None:
            syntax_sums.add(probs, mask, syntax[number])
        for observer in observers or ():
            observer.add(number, probs, mask)
        if keep:
            kept[number] = probs
    position_count = _position_counts(batches, run.logit_rule(layer, head), width)
    mean_map = np.divide(sums.position_sum, position_count, out=sums.position_sum, where=position_count > 0)
    deviation = 0.0
    for number, batch in enumerate(batches):
        probs = kept.pop(number) if number in kept else batch_attention(
            run, layer, head, batch, queries, keys, out=workspace("spare", _cells(batch)))
        rule = run.logit_rule(layer, head)
        mask = batch_mask(batch, rule)
        side = probs.shape[1]
        # only where a query may attend (its spans, where the batch has them): elsewhere probs and mask are 0
        for at, to in key_spans(batch, rule, mask) or [(slice(0, side), slice(0, side))]:
            cells = probs[:, at, to]
            np.subtract(cells, mean_map[None, at, to], out=cells)
            np.abs(cells, out=cells)
            cells *= mask[:, at, to]
            deviation += float(cells.sum())
    found = _finish(sums, deviation, pd.concat(candidates, ignore_index=True), n_exemplars)
    if syntax is not None:
        found.values.update(syntax_sums.values())
    if moved is not None:
        found.values.update(moved.values(found.values))
    return found


def _position_counts(batches: list[SentenceBatch], rule: LogitRule, width: int) -> np.ndarray:
    """float64 ``[width, width]``: how many sentences of ``batches`` allow each pair of positions under ``rule``'s mask
    (the same for every head of the mask: kept for the next heads, read-only)."""

    def make() -> np.ndarray:
        count = np.zeros((width, width))
        for batch in batches:
            mask = batch_mask(batch, rule)
            side = mask.shape[1]
            count[:side, :side] += mask[0] if len(mask) == 1 else mask.sum(axis=0)
        count.flags.writeable = False
        return count

    return _POSITION_COUNTS.get(batches, (rule.causal, rule.window, rule.chunk, width), make)


#: the latest :func:`_position_counts`
_POSITION_COUNTS = BatchMemo(1)


def _cells(batch: SentenceBatch) -> tuple[int, int, int]:
    """A batch's ``[sentence, query, key]`` shape."""
    return len(batch.sentences), batch.rows.shape[1], batch.rows.shape[1]


def _distances(side: int) -> np.ndarray:
    """float32 ``[side, side]`` ``|i - j|`` (exact), a view of one cached matrix as wide as the widest asked."""
    global _DISTANCES
    if _DISTANCES.shape[0] < side:
        position = np.arange(side)
        _DISTANCES = np.abs(position[None, :] - position[:, None]).astype(np.float32)
    return _DISTANCES[:side, :side]


_DISTANCES = np.zeros((0, 0), dtype=np.float32)


def _accumulate(sums: _Accumulator, batch: SentenceBatch, probs: np.ndarray, mask: np.ndarray,
                kinds: TokenKinds, scratch: np.ndarray) -> None:
    """Adds one batch to ``sums``; ``scratch`` is a spare array of ``probs``'s shape (``probs`` itself, whose
    masked entries are exactly 0, is left as it was)."""
    side = probs.shape[1]
    position = np.arange(side)
    queries = mask.any(axis=2)                                          # [batch, query]
    n_keys = mask.sum(axis=2)
    totals = sums.totals
    totals["queries"] += queries.sum()

    for offset in range(max(-sums.max_offset, 1 - side), min(sums.max_offset, side - 1) + 1):   # j - i
        weights, allowed = np.diagonal(probs, offset, 1, 2), np.diagonal(mask, offset, 1, 2)
        sums.offset_weight[offset + sums.max_offset] += weights.sum()
        sums.offset_count[offset + sums.max_offset] += np.count_nonzero(allowed)
        if offset <= 0:     # the diagonal's first pair is query -offset and key 0, the first token
            sums.first_weight[offset + sums.max_offset] += weights[:, 0].sum()
            sums.first_count[offset + sums.max_offset] += np.count_nonzero(allowed[:, 0])
    sums.position_sum[:side, :side] += probs[0] if len(probs) == 1 else probs.sum(axis=0)

    if kinds.patch is None:
        weighted = np.multiply(probs, _distances(side), out=scratch)
        distance_rest = weighted[:, :, 1:].sum(axis=2)
        totals["distance"] += float(distance_rest.sum() + weighted[:, :, 0].sum())
        rest = probs[:, :, 1:].sum(axis=2)
        has_rest = queries & (mask[:, :, 1:].any(axis=2)) & (rest > 0)
        totals["distance_no_first"] += float((distance_rest[has_rest] / rest[has_rest]).sum())
        totals["queries_no_first"] += has_rest.sum()

    strongest, margin = _entropy_and_margin(totals, probs, mask, queries, n_keys, scratch)

    totals["first_weight"] += float(probs[:, :, 0][queries].sum())
    rows = np.maximum(batch.rows, 0)
    special = kinds.special[rows] & batch.valid
    totals["special_weight"] += float(probs.sum(axis=1)[special].sum())

    # A query has a strongest key only when it is ahead of the next one (not among equals).
    decided = queries & ((n_keys == 1) | (margin > TIE_MARGIN))
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


def _entropy_and_margin(totals: dict, probs: np.ndarray, mask: np.ndarray, queries: np.ndarray, n_keys: np.ndarray,
                        scratch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Adds the batch's entropies and concentration to ``totals``; returns each query's strongest key and its margin
    over the second strongest (``probs`` is left as it was)."""
    # p log p, 0 where p is 0: log(max(p, the least subnormal)) is log p for every p > 0, and finite; taken on the
    # allowed pairs only (a masked pair's p is exactly 0, so its product is 0 whatever its finite factor)
    logs = np.maximum(probs, np.finfo(np.float64).smallest_subnormal, out=scratch)
    np.log(logs, out=logs, where=mask)
    logs *= probs
    entropy = -logs.sum(axis=2)
    totals["entropy"] += float(entropy[queries].sum())
    multi = queries & (n_keys >= 2)
    totals["entropy_normalised"] += float((entropy[multi] / np.log(n_keys[multi])).sum())
    totals["queries_multi"] += multi.sum()
    # The top two weights of a query: its strongest, then the strongest of the rest (the masked keys' 0 is
    # below or equal to any allowed weight, so for a query with two keys or more it is never picked first).
    strongest = probs.argmax(axis=2)                                    # [batch, query]
    top = np.take_along_axis(probs, strongest[:, :, None], axis=2)
    np.put_along_axis(probs, strongest[:, :, None], -1.0, axis=2)
    second = probs.max(axis=2)
    np.put_along_axis(probs, strongest[:, :, None], top, axis=2)
    margin = top[:, :, 0] - second
    totals["concentration"] += float(margin[multi].sum())
    return strongest, margin


def _accumulate_patches(sums: _Accumulator, batch: SentenceBatch, probs: np.ndarray, mask: np.ndarray,
                        patch: np.ndarray, decided: np.ndarray, strongest: np.ndarray) -> None:
    """An image batch's grid statistics (see the module): distances between patches, and where the strongest
    key of each patch query lies on the grid."""
    totals = sums.totals
    sums.image = True
    place = patch[np.maximum(batch.rows, 0)]                             # [batch, token, 2]
    is_patch = (place[:, :, 0] >= 0) & batch.valid
    pairs = mask & is_patch[:, :, None] & is_patch[:, None, :]
    step = place[:, None, :, :] - place[:, :, None, :]                   # [batch, query, key, 2]: key - query
    distance = np.sqrt((step.astype(np.float64) ** 2).sum(axis=3))
    queries = is_patch & mask.any(axis=2)
    totals["patch_queries"] += queries.sum()
    weighted = np.where(pairs, probs * distance, 0.0).sum(axis=2)
    totals["distance"] += float(weighted[queries].sum())
    patch_weight = np.where(pairs, probs, 0.0).sum(axis=2)
    has_rest = queries & (patch_weight > 0)
    totals["distance_no_first"] += float((weighted[has_rest] / patch_weight[has_rest]).sum())
    totals["queries_no_first"] += has_rest.sum()
    picked = decided & queries & np.take_along_axis(is_patch, strongest, axis=1)
    row_step, col_step = (np.take_along_axis(step[..., axis], strongest[:, :, None], axis=2)[:, :, 0] for axis in (0, 1))
    totals["previous"] += (picked & (row_step == 0) & (col_step == -1)).sum()
    totals["next"] += (picked & (row_step == 0) & (col_step == 1)).sum()
    totals["neighbour"] += (picked & (np.abs(row_step) + np.abs(col_step) == 1)).sum()
    totals["same_row"] += (picked & (row_step == 0) & (np.abs(col_step) >= 2)).sum()
    totals["same_col"] += (picked & (col_step == 0) & (np.abs(row_step) >= 2)).sum()


def _exemplar_candidates(batch: SentenceBatch, probs: np.ndarray, mask: np.ndarray, kinds: TokenKinds,
                         count: int, scratch: np.ndarray | None = None) -> pd.DataFrame:
    """The strongest pair of each sentence of the batch, ignoring the first token and special tokens.

    The weights of the pairs left out are set to 0 in ``scratch`` (masked pairs are 0 already): a sentence's
    strongest weight is kept only when above 0, so it is one of the usable pairs, the first of them in the
    sentence's row-major order as when the others were below every weight."""
    rows = np.maximum(batch.rows, 0)
    special = kinds.special[rows] | ~batch.valid
    usable_keys = ~special
    usable_keys[:, 0] = False
    weights = np.multiply(probs, usable_keys[:, None, :], out=scratch)
    weights[special] = 0.0
    weights = weights.reshape(len(batch.sentences), -1)
    best = weights.argmax(axis=1)
    strongest = weights[np.arange(len(best)), best]
    keep = np.argsort(-strongest)[:count]
    keep = keep[strongest[keep] > 0]
    side = probs.shape[1]
    return pd.DataFrame({"sentence": batch.sentences[keep], "query": best[keep] // side,
                         "key": best[keep] % side, "weight": strongest[keep]})


def _finish(sums: _Accumulator, deviation: float, candidates: pd.DataFrame, n_exemplars: int) -> HeadStatistics:
    totals = sums.totals
    queries = max(totals["queries"], 1.0)
    fixed = np.abs(np.arange(-sums.max_offset, sums.max_offset + 1)) >= 2
    fixed_shares = np.where(fixed, sums.argmax_offset, -1.0)
    best_fixed = int(fixed_shares.argmax())
    values = {
        "mean_distance": totals["distance"] / queries,
        "mean_distance_no_first": totals["distance_no_first"] / max(totals["queries_no_first"], 1.0),
        "entropy": totals["entropy"] / queries,
        "entropy_normalised": totals["entropy_normalised"] / max(totals["queries_multi"], 1.0),
        "variability": deviation / (2 * queries),
        "argmax_self": totals["self"] / queries,
        "argmax_first": totals["first"] / queries,
        "argmax_previous": totals["previous"] / queries,
        "argmax_next": totals["next"] / queries,
        "argmax_delimiter": totals["delimiter"] / queries,
        "argmax_offset": float(sums.argmax_offset[best_fixed]) / queries,
        "offset": float(best_fixed - sums.max_offset),
        "concentration": totals["concentration"] / max(totals["queries_multi"], 1.0),
        "first_token_attention": totals["first_weight"] / queries,
        "special_attention": totals["special_weight"] / queries,
    }
    if sums.image:
        patch_queries = max(totals["patch_queries"], 1.0)
        values.update({
            "mean_distance": totals["distance"] / patch_queries,
            "argmax_previous": totals["previous"] / patch_queries,
            "argmax_next": totals["next"] / patch_queries,
            "argmax_neighbour": totals["neighbour"] / patch_queries,
            "argmax_same_row": totals["same_row"] / patch_queries,
            "argmax_same_col": totals["same_col"] / patch_queries,
        })
    profile = np.divide(sums.offset_weight, sums.offset_count, out=np.full_like(sums.offset_weight, np.nan),
                        where=sums.offset_count > 0)
    exemplars = candidates.sort_values("weight", ascending=False).head(n_exemplars).reset_index(drop=True)
    return HeadStatistics(values={k: float(v) for k, v in values.items()}, relative_position=profile,
                          exemplars=exemplars, offset_support=_offset_support(sums))


def _offset_support(sums: _Accumulator) -> np.ndarray:
    """``[OFFSET_SUPPORT_ROWS, offset]``: each offset's queries, those whose key there is not the first token, and
    their mean attention there."""
    rest = sums.offset_count - sums.first_count
    mean_rest = np.divide(sums.offset_weight - sums.first_weight, rest, out=np.full_like(rest, np.nan), where=rest > 0)
    return np.stack([sums.offset_count, rest, mean_rest])
