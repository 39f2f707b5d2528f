"""Which queries related heads are compared on (:mod:`qkviz.analysis.atlas.head_similarity`), under a budget of
query-key pairs, and each sampled query's attention over its whole support.

Whole sentences in a seeded random order until they hold ``max_queries`` query tokens; when their supports would
hold more pairs than :func:`pair_budget` allows for the run's head count (a 3,000-token document alone holds
4.5 M causal pairs), queries one by one in a seeded random order of all the run's tokens, each with its whole
support, until the next would pass the budget. The budget is the smaller of the attention array's memory
(:data:`ATTENTION_BYTES`) and the JS step's time (:data:`JS_CELLS`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qkviz.core.attention import allowed_keys, attention_logits, masked_softmax
from qkviz.core.logit_rule import LogitRule
from qkviz.store.run import StoredRun

#: bytes of the attention array (float64 ``[heads, pairs]``) the sample may fill
ATTENTION_BYTES = 1_500_000_000
#: cells of the JS step, head pairs x query-key pairs (about 90 M a second a core: 6e10 is about 75 queries of
#: 3,000-token documents at 1,024 heads, some 5 minutes on two cores)
JS_CELLS = 60_000_000_000
#: query-key cells per padded block of sampled queries (small blocks waste little on padding)
BATCH_CELLS = 1 << 14


@dataclass(frozen=True)
class QuerySample:
    """The queries every head is compared on."""

    tokens: np.ndarray      # int64 [query]: the queries' token numbers, sorted
    sentences: np.ndarray   # int64 [sentence]: their sentences, sorted
    n_pairs: int            # query-key pairs of their supports
    max_pairs: int
    subsampled: bool        # queries sampled one by one, not whole sentences


def sample_sentences(run: StoredRun, max_queries: int, seed: int = 0) -> np.ndarray:
    """Sorted int64 sentence numbers: a seeded random order of the run's sentences, taken whole until
    they hold at least ``max_queries`` tokens (all of them when the run has fewer)."""
    lengths = run.sentences.n_tokens.to_numpy(np.int64)
    order = np.random.default_rng(seed).permutation(len(lengths))
    count = int(np.searchsorted(np.cumsum(lengths[order]), max_queries)) + 1
    return np.sort(order[:min(count, len(order))])


def pair_budget(n_heads: int, max_attention_bytes: int | None = None, max_js_cells: int | None = None) -> int:
    """The most query-key pairs a sample may hold for ``n_heads`` heads (at least 1): the attention
    array within :data:`ATTENTION_BYTES` and the JS step within :data:`JS_CELLS`."""
    max_attention_bytes = ATTENTION_BYTES if max_attention_bytes is None else max_attention_bytes
    max_js_cells = JS_CELLS if max_js_cells is None else max_js_cells
    by_memory = max_attention_bytes // (8 * max(n_heads, 1))
    by_time = max_js_cells // max(n_heads * (n_heads - 1) // 2, 1)
    return max(1, min(by_memory, by_time))


def query_supports(run: StoredRun, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per query token: ``(sentence, position, lo, hi)``, its support: the keys ``[lo, hi)`` (positions in
    its sentence) the causal or encoder mask allows (:func:`qkviz.core.attention.allowed_keys`; no window)."""
    firsts = run.sentences.first_token.to_numpy(np.int64)
    lengths = run.sentences.n_tokens.to_numpy(np.int64)
    tokens = np.asarray(tokens, dtype=np.int64)
    sentence = np.searchsorted(firsts, tokens, side="right") - 1
    position = tokens - firsts[sentence]
    lo, hi = allowed_keys(position, lengths[sentence], LogitRule(scale=1.0, causal=run.is_causal))
    return sentence, position, lo, hi


def sentence_token_numbers(run: StoredRun, sentences: np.ndarray) -> np.ndarray:
    """int64: the token numbers of ``sentences``, in their order."""
    firsts = run.sentences.first_token.to_numpy(np.int64)
    lengths = run.sentences.n_tokens.to_numpy(np.int64)
    return np.concatenate([np.arange(firsts[s], firsts[s] + lengths[s]) for s in sentences] + [[]]).astype(np.int64)


def queries_in_random_order(n_tokens: int, max_queries: int, seed: int) -> np.ndarray:
    """int64: ``min(max_queries, n_tokens)`` distinct token numbers in a seeded random order (numpy draws a
    few from many without a permutation of them all)."""
    return np.random.default_rng(seed).choice(n_tokens, size=min(max_queries, n_tokens), replace=False).astype(np.int64)


def sample_queries(run: StoredRun, max_queries: int, seed: int = 0, max_pairs: int | None = None) -> QuerySample:
    """The queries to compare heads on: every token of :func:`sample_sentences` when their supports hold at
    most ``max_pairs`` query-key pairs (default :func:`pair_budget` of the run's heads); else queries
    one by one in a seeded random order of the run's tokens, taken while their supports fit the budget
    (the first one always), at most ``max_queries``."""
    max_pairs = pair_budget(run.n_layers * run.n_heads) if max_pairs is None else max_pairs
    sentences = sample_sentences(run, max_queries, seed)
    tokens = sentence_token_numbers(run, sentences)
    _, _, lo, hi = query_supports(run, tokens)
    if int((hi - lo).sum()) <= max_pairs:
        return QuerySample(tokens, sentences, int((hi - lo).sum()), max_pairs, False)
    candidates = queries_in_random_order(run.n_tokens, max_queries, seed)
    sentence, _, lo, hi = query_supports(run, candidates)
    count = max(1, int(np.searchsorted(np.cumsum(hi - lo), max_pairs, side="right")))
    order = np.argsort(candidates[:count])
    return QuerySample(candidates[:count][order], np.unique(sentence[:count]), int((hi - lo)[:count].sum()),
                       max_pairs, True)


@dataclass(frozen=True)
class QueryBlock:
    """Sampled queries of similar support size, their supports padded to ``width`` keys."""

    queries: np.ndarray     # int64 [query]: token numbers
    keys: np.ndarray        # int64 [query, width]: token numbers of the support's keys (the query itself as padding)
    support: np.ndarray     # bool [query, width]: a key of the query's support, not padding
    positions: np.ndarray   # int64 [query]: the query's position in its sentence
    key_positions: np.ndarray   # int64 [query, width]: the keys' positions in the sentence
    lengths: np.ndarray     # int64 [query]: its sentence's length


def query_blocks(run: StoredRun, tokens: np.ndarray, max_cells: int = BATCH_CELLS) -> list[QueryBlock]:
    """``tokens`` (queries) sorted by support size, descending, in padded blocks of at most ``max_cells``
    cells (one query at least)."""
    sentence, position, lo, hi = query_supports(run, tokens)
    firsts = run.sentences.first_token.to_numpy(np.int64)
    lengths = run.sentences.n_tokens.to_numpy(np.int64)
    order = np.argsort(-(hi - lo), kind="stable")
    blocks, start = [], 0
    while start < len(order):
        width = int(hi[order[start]] - lo[order[start]])
        chosen = order[start:start + max(1, max_cells // max(width, 1))]
        key_positions = lo[chosen, None] + np.arange(width)[None, :]
        support = key_positions < hi[chosen, None]
        keys = np.where(support, firsts[sentence[chosen], None] + key_positions, tokens[chosen, None])
        blocks.append(QueryBlock(tokens[chosen], keys, support, position[chosen], key_positions,
                                 lengths[sentence[chosen]]))
        start += len(chosen)
    return blocks


def block_attention(run: StoredRun, layer: int, head: int, block: QueryBlock, queries: np.ndarray, keys: np.ndarray
                    ) -> np.ndarray:
    """float64 ``[query, width]``: each query's attention over its support (the head's ``queries`` and
    ``keys``, ``[token, d_head]``, under its :class:`~qkviz.core.logit_rule.LogitRule`); 0 outside the layer's
    sliding window or chunk and on padding."""
    rule = run.logit_rule(layer, head)
    allowed = block.support
    if rule.window is not None or rule.chunk is not None:
        lo, hi = allowed_keys(block.positions, block.lengths, rule)
        allowed = allowed & (block.key_positions >= lo[:, None]) & (block.key_positions < hi[:, None])
    logits = attention_logits(queries[block.queries][:, None, :], keys[block.keys], rule,
                              query_positions=block.positions[:, None], key_positions=block.key_positions
                              )[:, 0, :]
    return masked_softmax(logits, allowed, sink=rule.sink)


def sentence_pairs(run: StoredRun, sentences: np.ndarray) -> int:
    """Query-key pairs of every query of ``sentences`` over its support."""
    _, _, lo, hi = query_supports(run, sentence_token_numbers(run, sentences))
    return int((hi - lo).sum())
