"""One head's attention over one long document, recomputed block by block from its queries and keys (numpy only):
the map pooled to a grid of pixels, and the head's profile over the document.

A document of ``n`` tokens has ``n^2`` query-key pairs (67 million at 8,192 tokens): they are never held at once.
Queries are taken in blocks of rows; each block's attention over the keys its rows may see is
:func:`qkviz.core.attention.attention_logits` and :func:`~qkviz.core.attention.masked_softmax` under the mask of
:func:`~qkviz.core.attention.allowed_keys` (the one place that applies the head's
:class:`~qkviz.core.logit_rule.LogitRule`: scale, soft cap, causal / sliding-window / chunk mask, ALiBi, sink),
at most ``max_cells`` pairs at a time, and is reduced at once to what is kept:

* :func:`pooled_attention` -- a ``[height, width]`` grid over a region of the map (all of it, or a zoomed part),
  each pixel the max or the mean of the weights of its query-key cells (``pixel_edges`` splits rows and columns),
  with :func:`pooled_allowed` saying which pixels hold any pair the mask allows;
* :func:`head_profile` -- the head's attention mass against the query-key distance in log bins, its mass on the
  first token and on special tokens, its previous-token score and its induction score over a repeated passage
  (:func:`repeated_span`), all means over the document's queries;
* :func:`document_overview` -- both from one pass over the document (what a head switch needs).

The blocks are independent: :func:`each_block` computes them on two threads (numpy releases the GIL in their
arithmetic), each writing its own rows of the map, the profile's sums added in block order (the same figures as
one thread).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterator, TypeVar

import numpy as np

from qkviz.core.attention import allowed_keys, attention_logits, masked_softmax
from qkviz.core.logit_rule import LogitRule

#: query-key pairs computed at a time (float64: 16 MB a block, a few times that with the softmax's temporaries)
MAX_BLOCK_CELLS = 1 << 21
#: the shortest run of tokens that counts as a repeated passage
MIN_REPEAT = 16
REDUCTIONS = ("max", "mean")
#: threads computing a document's blocks at once (a head switch in the app: two cores halve its time)
MAX_THREADS = 2
T = TypeVar("T")


@dataclass(frozen=True)
class DocumentHead:
    """One head over one document: ``queries`` and ``keys`` ``[token, d_head]`` (the document's tokens, its first
    token first) and the head's logit rule; with ``key_weights`` ``[token]``, value-weighted: each weight times its
    key's, every row rescaled to the share its keys had (1, less a sink's), so that a row still sums to it."""

    queries: np.ndarray
    keys: np.ndarray
    rule: LogitRule
    key_weights: np.ndarray | None = None

    @property
    def n_tokens(self) -> int:
        return len(self.queries)

    def key_range(self, position: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per query position, the keys ``[lo, hi)`` it may attend to (:func:`allowed_keys`)."""
        return allowed_keys(position, self.n_tokens, self.rule)


def document_head(run, layer: int, head: int, sentence: int, key_weights: np.ndarray | None = None) -> DocumentHead:
    """The :class:`DocumentHead` of ``run``'s sentence (document) ``sentence`` in head ``(layer, head)``, read from
    the memory-mapped vectors (only its rows); ``key_weights`` ``[token of the run]`` value-weights it (e.g.
    :func:`qkviz.analysis.statistics.attention_weighting.moved_norms`)."""
    rows = run.sentence_tokens(sentence)
    weights = None if key_weights is None else np.asarray(key_weights[rows], dtype=np.float64)
    return DocumentHead(run.vector_rows("queries", layer, head, rows), run.vector_rows("keys", layer, head, rows),
                        run.logit_rule(layer, head), weights)


@dataclass(frozen=True)
class RepeatedSpan:
    """A passage of a document that repeats an earlier one: ``queries`` (positions in the later copy) and, for each,
    ``targets``, the position after its earlier copy (where an induction head attends)."""

    queries: np.ndarray
    targets: np.ndarray
    offset: int

    def __len__(self) -> int:
        return len(self.queries)


def repeated_span(token_ids: np.ndarray, min_length: int = MIN_REPEAT) -> RepeatedSpan | None:
    """The document's repeated passage, or None: every run of ``min_length`` token ids seen earlier is matched to
    its first occurrence; the most common distance between the copies (at least 2) is the repeat's offset, and
    the positions of the later copy are those of the runs matched at that offset."""
    ids = np.asarray(token_ids).tolist()
    first: dict[tuple, int] = {}
    matches: list[tuple[int, int]] = []
    for start in range(len(ids) - min_length + 1):
        gram = tuple(ids[start:start + min_length])
        earlier = first.setdefault(gram, start)
        if start - earlier >= 2:
            matches.append((start, start - earlier))
    if not matches:
        return None
    offsets, counts = np.unique([offset for _, offset in matches], return_counts=True)
    offset = int(offsets[np.argmax(counts)])
    later = np.zeros(len(ids), dtype=bool)
    for start, found in matches:
        if found == offset:
            later[start:start + min_length] = True
    queries = np.flatnonzero(later)
    return RepeatedSpan(queries=queries, targets=queries - offset + 1, offset=offset)


def pixel_edges(start: int, stop: int, pixels: int) -> np.ndarray:
    """int ``[m + 1]``: ``[start, stop)`` split into ``m = min(pixels, stop - start)`` runs of consecutive
    positions as even as whole positions allow (every run non-empty)."""
    count = max(1, min(int(pixels), stop - start))
    edges = np.floor(np.linspace(start, stop, count + 1)).astype(np.int64)
    edges[-1] = stop
    return edges


def distance_edges(n_tokens: int) -> np.ndarray:
    """int: the log bins of query-key distance, ``[0, 1), [1, 2), [2, 4), [4, 8) ...`` up to ``n_tokens``."""
    edges = [0, 1]
    while edges[-1] < n_tokens:
        edges.append(edges[-1] * 2)
    return np.asarray(edges, dtype=np.int64)


def block_spans(head: DocumentHead, row_edges: np.ndarray, max_cells: int = MAX_BLOCK_CELLS
                ) -> list[tuple[int, int, int, int]]:
    """``(first row, stop row, first key, stop key)`` of the blocks :func:`attention_blocks` computes: the query
    rows ``[row_edges[0], row_edges[-1])`` in blocks that start and end on ``row_edges``, each with the keys its rows
    may see, of at most ``max_cells`` pairs a block (one run of ``row_edges`` at least)."""
    row_edges = np.asarray(row_edges, dtype=np.int64)
    lo_first, _ = head.key_range(row_edges[:-1])          # the keys a run's first row may see start here ...
    _, hi_last = head.key_range(row_edges[1:] - 1)        # ... and its last row's stop here (both grow with the row)
    spans, edge = [], 0
    while edge < len(row_edges) - 1:
        first = int(row_edges[edge])
        cells = (row_edges[edge + 1:] - first) * (hi_last[edge:] - lo_first[edge])     # non-decreasing
        stop_edge = edge + max(1, int(np.searchsorted(cells, max_cells, side="right")))
        stop = int(row_edges[stop_edge])
        lo, hi = head.key_range(np.arange(first, stop))
        spans.append((first, stop, int(lo.min()), int(hi.max())))
        edge = stop_edge
    return spans


def block_probabilities(head: DocumentHead, first: int, stop: int, key_first: int, key_stop: int) -> np.ndarray:
    """``[stop - first, key_stop - key_first]``: each query row's exact attention over those keys (zero where its
    own mask forbids)."""
    lo, hi = head.key_range(np.arange(first, stop))
    key_position = np.arange(key_first, key_stop)
    allowed = (key_position[None, :] >= lo[:, None]) & (key_position[None, :] < hi[:, None])
    logits = attention_logits(head.queries[first:stop], head.keys[key_first:key_stop], head.rule, allowed,
                              query_positions=np.arange(first, stop), key_positions=key_position)
    probabilities = masked_softmax(logits, sink=head.rule.sink, overwrite=True)  # the block's own logits: no copy
    if head.key_weights is None:
        return probabilities
    # a block holds every key its rows may see (block_spans), so each row is rescaled whole
    shares = probabilities.sum(axis=1, keepdims=True)
    probabilities *= head.key_weights[key_first:key_stop][None, :]
    totals = probabilities.sum(axis=1, keepdims=True)
    return np.divide(probabilities * shares, totals, out=np.zeros_like(probabilities), where=totals > 0)


def attention_blocks(head: DocumentHead, row_edges: np.ndarray, max_cells: int = MAX_BLOCK_CELLS
                     ) -> Iterator[tuple[int, int, int, np.ndarray]]:
    """``(first row, stop row, first key, probabilities [rows, keys])`` for the query rows ``[row_edges[0],
    row_edges[-1])`` in blocks that start and end on ``row_edges`` (:func:`block_spans`): each row's exact
    attention over the keys ``[first key, first key + keys)`` its block may see (zero where its own mask
    forbids), of at most ``max_cells`` pairs a block (one run of ``row_edges`` at least)."""
    for first, stop, key_first, key_stop in block_spans(head, row_edges, max_cells):
        yield first, stop, key_first, block_probabilities(head, first, stop, key_first, key_stop)


def each_block(head: DocumentHead, row_edges: np.ndarray, work: Callable[[int, int, int, np.ndarray], T],
               max_cells: int = MAX_BLOCK_CELLS, threads: int | None = None) -> list[T]:
    """``work(first, stop, key_first, probabilities)`` of every block of :func:`attention_blocks`, in order, on
    ``threads`` threads at a time (default: the cores this process may use, at most :data:`MAX_THREADS`; numpy
    releases the GIL in the blocks' arithmetic). ``work`` may write only its own rows of shared arrays."""
    spans = block_spans(head, row_edges, max_cells)
    threads = min(MAX_THREADS, available_cores()) if threads is None else max(1, threads)

    def one(span: tuple[int, int, int, int]) -> T:
        first, stop, key_first, key_stop = span
        return work(first, stop, key_first, block_probabilities(head, first, stop, key_first, key_stop))

    if threads == 1 or len(spans) < 2:
        return [one(span) for span in spans]
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(one, spans))


def available_cores() -> int:
    """The cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@dataclass(frozen=True)
class PooledMap:
    """A region of a head's attention map pooled to pixels: ``values`` ``[height, width]`` (each pixel's max or
    mean weight over its cells), ``allowed`` bool ``[height, width]`` (whether any of its cells is a pair the mask
    allows), pixel row ``r`` holding the queries ``[row_edges[r], row_edges[r + 1])`` and pixel column ``c`` the
    keys ``[column_edges[c], column_edges[c + 1])``."""

    values: np.ndarray
    allowed: np.ndarray
    row_edges: np.ndarray
    column_edges: np.ndarray
    reduce: str


def pooled_allowed(head: DocumentHead, row_edges: np.ndarray, column_edges: np.ndarray) -> np.ndarray:
    """bool ``[rows, columns]``: whether each pixel holds a pair the mask allows (from the key ranges, which grow
    with the query: the queries whose range reaches a column run form one interval)."""
    lo, hi = head.key_range(np.arange(head.n_tokens))
    reaching = np.searchsorted(hi, column_edges[:-1], side="right")        # first query with hi > column start
    before = np.searchsorted(lo, column_edges[1:], side="left") - 1        # last query with lo < column stop
    first = np.maximum(row_edges[:-1, None], reaching[None, :])
    last = np.minimum(row_edges[1:, None] - 1, before[None, :])
    return first <= last


def _pool_block(probs: np.ndarray, key_first: int, row_edges: np.ndarray, column_edges: np.ndarray,
                reduce: str) -> np.ndarray:
    """``[block's row runs, column runs]`` pooled values of one block (``row_edges`` local to it): its rows
    reduced first (contiguous), then the column runs that meet its keys (the others, and the parts of a run
    outside its keys, hold only zeros)."""
    ufunc = np.maximum if reduce == "max" else np.add
    by_row = ufunc.reduceat(probs, row_edges[:-1], axis=0)
    local = np.clip(column_edges - key_first, 0, probs.shape[1])
    meets = np.flatnonzero(local[1:] > local[:-1])
    pooled = np.zeros((len(row_edges) - 1, len(column_edges) - 1))
    if len(meets):
        pooled[:, meets] = ufunc.reduceat(by_row[:, :local[meets[-1] + 1]], local[meets], axis=1)
    if reduce == "mean":
        pooled /= np.diff(row_edges)[:, None] * np.diff(column_edges)[None, :]
    return pooled


@dataclass
class _Pooler:
    """Accumulates a :class:`PooledMap` from the blocks of :func:`attention_blocks` over ``row_edges``."""

    row_edges: np.ndarray
    column_edges: np.ndarray
    reduce: str

    def __post_init__(self):
        self.values = np.zeros((len(self.row_edges) - 1, len(self.column_edges) - 1))

    def add(self, first: int, stop: int, key_first: int, probs: np.ndarray) -> None:
        run_first, run_stop = np.searchsorted(self.row_edges, [first, stop])
        local = self.row_edges[run_first:run_stop + 1] - first
        self.values[run_first:run_stop] = _pool_block(probs, key_first, local, self.column_edges, self.reduce)

    def result(self, head: DocumentHead) -> PooledMap:
        return PooledMap(self.values, pooled_allowed(head, self.row_edges, self.column_edges), self.row_edges,
                         self.column_edges, self.reduce)


def pooled_attention(head: DocumentHead, rows: tuple[int, int] | None = None, columns: tuple[int, int] | None = None,
                     shape: tuple[int, int] = (512, 512), reduce: str = "max",
                     max_cells: int = MAX_BLOCK_CELLS, threads: int | None = None) -> PooledMap:
    """The attention map of queries ``rows`` ``[start, stop)`` and keys ``columns`` (default: the whole
    document) pooled to at most ``shape`` ``(height, width)`` pixels by ``reduce`` (``"max"`` or ``"mean"`` of each
    pixel's weights, masked pairs counting 0); every row's softmax is over all the keys it may see, not only the
    region's. Blocks run on ``threads`` threads (:func:`each_block`)."""
    if reduce not in REDUCTIONS:
        raise ValueError(f"reduce must be one of {REDUCTIONS}, got {reduce!r}")
    rows = rows or (0, head.n_tokens)
    columns = columns or (0, head.n_tokens)
    pooler = _Pooler(pixel_edges(*rows, shape[0]), pixel_edges(*columns, shape[1]), reduce)
    each_block(head, pooler.row_edges, pooler.add, max_cells, threads)
    return pooler.result(head)


@dataclass(frozen=True)
class HeadProfile:
    """A head's attention over one document, each a mean over its queries (every row sums to 1):

    ``distance_mass[b]`` the weight on keys at a distance ``|query - key|`` in ``[distance_edges[b],
    distance_edges[b + 1])``; ``first_token`` on the document's first token; ``special_tokens`` on its special
    tokens; ``previous_token`` on the token just before (queries 1 ..); ``induction`` over the later copy of a
    repeated passage, on the token after the query's earlier copy (None without a repeat, ``n_induction`` its
    queries)."""

    distance_edges: np.ndarray
    distance_mass: np.ndarray
    first_token: float
    special_tokens: float
    previous_token: float
    induction: float | None
    n_induction: int


def _gather(probs: np.ndarray, rows: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """``probs[rows, keys]`` where ``keys`` is inside the block's columns, else 0."""
    inside = (keys >= 0) & (keys < probs.shape[1])
    return np.where(inside, probs[rows, np.clip(keys, 0, probs.shape[1] - 1)], 0.0)


def _distance_mass(probs: np.ndarray, local: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """float ``[len(edges) - 1]``: the block's total weight at each distance bin, from one reading of it: row ``r``
    (its query at column ``local[r]``) splits into runs of keys at the breakpoints ``local - e + 1`` (before the
    query) and ``local + e`` (after it) of every edge ``e``, summed together by one ``np.add.reduceat``."""
    upper = edges[1:]                                            # e_1 .. e_K
    breaks = np.concatenate([local[:, None] - upper[None, ::-1] + 1, local[:, None] + upper[None, :-1]], axis=1)
    bins = np.concatenate([np.arange(len(upper) - 1, -1, -1), np.arange(1, len(upper))])    # K-1 .. 0, 1 .. K-1
    width, total = probs.shape[1], probs.size
    index = (np.clip(breaks, 0, width) + (np.arange(len(local)) * width)[:, None]).ravel()
    following = np.append(index[1:], total)
    inside = index < total                                       # only the last row's empty runs are not
    sums = np.zeros(len(index))
    sums[inside] = np.add.reduceat(probs.ravel(), index[inside])
    sums[index >= following] = 0.0                               # an empty run (reduceat would give one weight)
    return np.bincount(np.tile(bins, len(local)), weights=sums, minlength=len(upper))


@dataclass
class _Profiler:
    """Accumulates a :class:`HeadProfile` from the blocks of :func:`attention_blocks` over every query."""

    n_tokens: int
    special: np.ndarray
    repeat: RepeatedSpan | None

    def __post_init__(self):
        self.edges = distance_edges(self.n_tokens)
        self.mass = np.zeros(len(self.edges) - 1)
        self.first = self.special_total = self.previous = self.induction = 0.0
        self.special_positions = np.flatnonzero(self.special)

    def contribution(self, first: int, stop: int, key_first: int, probs: np.ndarray) -> np.ndarray:
        """float ``[bins + 4]``: the block's mass per distance bin, then on the first token, on special tokens,
        on the previous token and on the induction targets (summed over its rows)."""
        width = probs.shape[1]
        rows = np.arange(stop - first)
        position = first + rows
        specials = self.special_positions - key_first
        specials = specials[(specials >= 0) & (specials < width)]
        after_first = position >= 1
        induction = 0.0
        if self.repeat is not None:
            chosen = (self.repeat.queries >= first) & (self.repeat.queries < stop)
            induction = _gather(probs, self.repeat.queries[chosen] - first,
                                self.repeat.targets[chosen] - key_first).sum()
        return np.concatenate([_distance_mass(probs, position - key_first, self.edges), [
            _gather(probs, rows, np.full(len(rows), -key_first)).sum(), probs[:, specials].sum(),
            _gather(probs, rows[after_first], (position - 1 - key_first)[after_first]).sum(), induction]])

    def add(self, contribution: np.ndarray) -> None:
        bins = len(self.mass)
        self.mass += contribution[:bins]
        self.first += contribution[bins]
        self.special_total += contribution[bins + 1]
        self.previous += contribution[bins + 2]
        self.induction += contribution[bins + 3]

    def result(self) -> HeadProfile:
        n = self.n_tokens
        n_induction = 0 if self.repeat is None else len(self.repeat)
        return HeadProfile(self.edges, self.mass / n, self.first / n, self.special_total / n,
                           self.previous / max(n - 1, 1), self.induction / n_induction if n_induction else None,
                           n_induction)


def head_profile(head: DocumentHead, special: np.ndarray, repeat: RepeatedSpan | None,
                 max_cells: int = MAX_BLOCK_CELLS, threads: int | None = None) -> HeadProfile:
    """The head's :class:`HeadProfile` over the document (``special`` bool ``[token]``: its special tokens;
    ``repeat``: its repeated passage, :func:`repeated_span`)."""
    profiler = _Profiler(head.n_tokens, np.asarray(special, dtype=bool), repeat)
    for contribution in each_block(head, pixel_edges(0, head.n_tokens, head.n_tokens), profiler.contribution,
                                   max_cells, threads):
        profiler.add(contribution)
    return profiler.result()


def document_overview(head: DocumentHead, special: np.ndarray, repeat: RepeatedSpan | None,
                      shape: tuple[int, int] = (512, 512), reduce: str = "max",
                      max_cells: int = MAX_BLOCK_CELLS, threads: int | None = None) -> tuple[PooledMap, HeadProfile]:
    """The whole map pooled to ``shape`` (:func:`pooled_attention`) and the :func:`head_profile`, from one pass
    over the document's attention (its blocks on ``threads`` threads, :func:`each_block`)."""
    if reduce not in REDUCTIONS:
        raise ValueError(f"reduce must be one of {REDUCTIONS}, got {reduce!r}")
    n = head.n_tokens
    pooler = _Pooler(pixel_edges(0, n, shape[0]), pixel_edges(0, n, shape[1]), reduce)
    profiler = _Profiler(n, np.asarray(special, dtype=bool), repeat)

    def both(first: int, stop: int, key_first: int, probs: np.ndarray) -> np.ndarray:
        pooler.add(first, stop, key_first, probs)           # its own rows of the map
        return profiler.contribution(first, stop, key_first, probs)

    for contribution in each_block(head, pooler.row_edges, both, max_cells, threads):   # summed in block order
        profiler.add(contribution)
    return pooler.result(head), profiler.result()
